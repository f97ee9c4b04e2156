"""Argument types shared by the command lines: a bad value is one line naming it."""

from __future__ import annotations

import argparse
import json
from typing import Any, NoReturn


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be 1 or more")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number")
    return value


def json_value(text: str) -> Any:
    """Any JSON value: an object, a list, a string, a number, true, false or null."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"not JSON: {err.msg} at character {err.pos}") from None


def json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"not JSON: {err.msg} at character {err.pos}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError('must be a JSON object, like {"to": "a@example.com"}')
    return value


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be 0 or more")
    return value


def thinking_budget(text: str) -> int | str:
    """A number of tokens, or "adaptive"."""
    if text == "adaptive":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither a number of tokens nor 'adaptive'") from None


def port_number(text: str) -> int:
    """A TCP port to listen on: 1 to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text} is not a port number from 1 to 65535")
    return value


def listen_address(text: str) -> tuple[str, int]:
    """`PORT` (on 127.0.0.1) or `HOST:PORT`."""
    host, _, number = text.rpartition(":")
    try:
        return host or "127.0.0.1", port_number(number)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not PORT or HOST:PORT (a port from 1 to 65535)"
        ) from None


class OneLineParser(argparse.ArgumentParser):
    """A server's command line: a bad flag or value is one line on stderr, argparse's exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message} (see: {self.prog} --help)\n")
