"""The data directory (`AGENT_DATA_DIR`, default ./.agent-data) and the effects log."""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any


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
