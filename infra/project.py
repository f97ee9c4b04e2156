"""The project's name and version, as pyproject.toml gives them: what the MCP server and
the A2A card say they are."""

from __future__ import annotations

import tomllib
from functools import cache
from importlib import metadata
from pathlib import Path

NAME = "temporal-agent-loop"
PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


@cache
def version() -> str:
    """pyproject.toml's version in a checkout, else the installed distribution's."""
    if PYPROJECT.is_file():
        return tomllib.loads(PYPROJECT.read_text())["project"]["version"]
    return metadata.version(NAME)
