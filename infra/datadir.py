"""The data directory (`AGENT_DATA_DIR`, default ./.agent-data), the effects log, and the
keys a process makes for itself when its operator gives none (`secret_key`)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import tempfile
import time
from pathlib import Path
from typing import Any

from infra.errors import ConfigError

MIN_SECRET_LENGTH = 32  # characters of an operator's key (`openssl rand -hex 32` gives 64)


def data_dir() -> Path:
    path = Path(os.environ.get("AGENT_DATA_DIR", ".agent-data")).resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_once(path: Path, data: bytes) -> None:
    """Write a content-addressed file atomically; an existing one already holds the same bytes."""
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """Append one JSON line; whole lines even with several worker processes."""
    line = json.dumps(record, ensure_ascii=False, default=str) + "\n"
    with open(path, "a", encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.write(line)
        fh.flush()
        os.fsync(fh.fileno())


def record_effect(tool: str, session_id: str, idempotency_key: str, input: dict[str, Any]) -> None:
    """One line in effects.jsonl per real execution of a side effect."""
    append_jsonl(
        data_dir() / "effects.jsonl",
        {
            "tool": tool,
            "session_id": session_id,
            "idempotency_key": idempotency_key,
            "input": input,
            "at": time.time(),
            "pid": os.getpid(),
        },
    )


def read_effects(path: Path | None = None) -> list[dict[str, Any]]:
    path = path or data_dir() / "effects.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def secret_key(env: str, file_name: str) -> bytes:
    """A signing key: the environment variable `env` when it is set (at least
    `MIN_SECRET_LENGTH` characters), else the file `file_name` in the data directory,
    made on first use with 256 random bits and mode 0600, so that every process sharing
    the directory (and every restart) signs with the same key."""
    given = os.environ.get(env, "").strip()
    if given:
        if len(given) < MIN_SECRET_LENGTH:
            raise ConfigError(
                f"{env} must be at least {MIN_SECRET_LENGTH} characters (try: openssl rand -hex 32)"
            )
        return given.encode()
    path = data_dir() / file_name
    if not path.exists():
        _create_secret(path)
    mode = path.stat().st_mode & 0o077
    if mode:
        raise ConfigError(
            f"{path} may be read by others (mode {oct(path.stat().st_mode & 0o777)}): chmod 600 it"
        )
    key = path.read_bytes().strip()
    if len(key) < MIN_SECRET_LENGTH:
        raise ConfigError(f"{path} holds no usable key: remove it, and a new one is made")
    return key


def _create_secret(path: Path) -> None:
    """Write a new key to `path` unless another process just did: whole, 0600, never replaced."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")  # mode 0600
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(secrets.token_hex(32).encode() + b"\n")
            fh.flush()
            os.fsync(fh.fileno())
        with contextlib.suppress(FileExistsError):  # another process's key came first: it stands
            os.link(tmp, path)
    finally:
        os.unlink(tmp)
