"""Programs some tests need from the machine: Debian's chromium (the browser tests), tmux
(the real-terminal test), and the MCP conformance suite with Node 22 (npm packages in
tests/conformance/node_modules).

Outside CI a missing one skips those tests, saying how to get it. Under `CI=true` it fails
them: a CI run must not pass by skipping what it is there to show (.ci/run installs both).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def require(what: str, present: bool, how: str = "apt-get install chromium tmux") -> None:
    """Skip the test (fail it under CI=true) unless `present`; `how` is what .ci/run does for it."""
    if present:
        return
    message = f"{what} is not installed (.ci/run installs it: {how})"
    if in_ci():
        pytest.fail(f"CI=true and {message}", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def chromium_installed() -> str:
    require(f"Debian's chromium ({CHROMIUM})", Path(CHROMIUM).exists())
    return CHROMIUM


@pytest.fixture(scope="session")
def tmux_installed() -> str:
    found = shutil.which("tmux")
    require("tmux", found is not None)
    return found or "tmux"
