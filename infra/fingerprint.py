"""Whose workflow code: a fingerprint of it, carried in the worker's identity.

A follower that replays a session's history (sessions/follow.py) must run the code that
wrote it: the same code may replay another version's history without an error and build a
different event stream. The worker's identity, written by the server into every
WORKFLOW_TASK_COMPLETED event, carries `wf=<fingerprint>`, so a follower knows for free
whether its replay can be trusted.

The fingerprint is 12 hex digits of a sha256 over the sources of workflows/ and of the
project modules they import (wire types, error names), and the temporalio and pydantic
versions. An identity is space-separated tokens, `PID@HOST` first, then `key=value`
tokens in any order (e.g. `4242@host live=http://... wf=0123456789ab`).
"""

from __future__ import annotations

import ast
import functools
import hashlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KEY = "wf"


def _imported_files(path: Path) -> set[Path]:
    """The project's own source files a module imports (directly)."""
    found: set[Path] = set()
    for node in ast.walk(ast.parse(path.read_bytes(), str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        for name in names:
            base = ROOT.joinpath(*name.split("."))
            for candidate in (base.with_suffix(".py"), base / "__init__.py"):
                if candidate.is_file():
                    found.add(candidate)
    return found


@functools.cache
def code_fingerprint() -> str:
    """12 hex digits over the workflow code, what it imports from the project, and the
    temporalio and pydantic versions."""
    import pydantic
    import temporalio

    workflow_files = set((ROOT / "workflows").glob("*.py"))
    files = set(workflow_files)
    for path in workflow_files:
        files |= _imported_files(path)
    digest = hashlib.sha256(f"temporalio {temporalio.__version__} pydantic {pydantic.VERSION}\n".encode())
    for path in sorted(files):
        digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def identity_tokens(identity: str) -> dict[str, str]:
    """The `key=value` tokens of an identity."""
    return dict(token.split("=", 1) for token in identity.split() if "=" in token)


def with_fingerprint(identity: str) -> str:
    """The identity with this process's `wf=` token (kept if it has one already)."""
    if KEY in identity_tokens(identity):
        return identity
    return f"{identity} {KEY}={code_fingerprint()}"


def fingerprint_of(identity: str) -> str | None:
    return identity_tokens(identity).get(KEY)
