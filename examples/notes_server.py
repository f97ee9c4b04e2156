"""An example MCP server for the example agents: notes kept as files in a folder.

`python -m examples.notes_server` serves it over stdio (the worker starts it from
`[mcp_servers.notes] command = [...]`). The folder is `$AGENT_DATA_DIR/notes`, or
`NOTES_DIR` (the definition passes both through from the worker: `env_passthrough`). Its tools say how they may be retried: listing and reading are read-only,
writing a note is idempotent (the same name and text twice leave the same file).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

# A note's name is one plain file name: no folders, nothing hidden, nothing outside.
NOTE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _.-]{0,99}$")
MAX_NOTE_CHARS = 100_000

server = MCPServer("notes", instructions="Notes kept as text files in one folder.", log_level="WARNING")


def notes_dir() -> Path:
    root = os.environ.get("NOTES_DIR") or Path(os.environ.get("AGENT_DATA_DIR", ".agent-data")) / "notes"
    path = Path(root).resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def _note_path(name: str) -> Path:
    if not NOTE_NAME.match(name) or name.endswith("."):
        raise ToolError(f"{name!r} is not a note name: letters, digits, space, _ . - (up to 100)")
    return notes_dir() / name


@server.tool(annotations=ToolAnnotations(title="List notes", read_only_hint=True))
def list_notes() -> str:
    """The names of all notes, one per line, with their sizes in bytes."""
    notes = [p for p in sorted(notes_dir().iterdir()) if p.is_file() and not p.name.startswith(".")]
    lines = [f"{p.name}\t{p.stat().st_size}" for p in notes]
    return "\n".join(lines) or "(no notes)"


@server.tool(annotations=ToolAnnotations(title="Read a note", read_only_hint=True))
def read_note(name: str) -> str:
    """The text of the note called `name`."""
    path = _note_path(name)
    if not path.is_file():
        raise ToolError(f"no note {name!r}; list_notes shows the notes there are")
    return path.read_text(encoding="utf-8", errors="replace")


@server.tool(
    annotations=ToolAnnotations(
        title="Write a note", read_only_hint=False, destructive_hint=True, idempotent_hint=True
    )
)
def write_note(name: str, text: str) -> str:
    """Create or replace the note called `name` with `text`."""
    if len(text) > MAX_NOTE_CHARS:
        raise ToolError(f"a note holds at most {MAX_NOTE_CHARS} characters; this text has {len(text)}")
    path = _note_path(name)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    # Replaced whole: a reader never sees half a note, and a repeated call leaves the same file.
    tmp.replace(path)
    return f"saved {name} ({len(text)} characters)"


if __name__ == "__main__":
    server.run("stdio")
