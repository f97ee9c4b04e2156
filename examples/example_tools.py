"""The tools that ship with the project: one read-only, one idempotent side effect, and
one at-most-once side effect that needs a person's approval.

The side-effecting ones write one line to effects.jsonl per real execution, so a person
or a test can count what really happened.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Annotated

from pydantic import Field

from activities.tools import ToolContext, tool
from infra.datadir import append_jsonl, data_dir, record_effect


@tool(policy="read_only")
def get_time(timezone_name: Annotated[str, Field(description="Only 'UTC' is supported")] = "UTC") -> str:
    """Return the current time as an ISO 8601 string."""
    if timezone_name.upper() != "UTC":
        raise ValueError(f"unsupported time zone {timezone_name!r}; use 'UTC'")
    return datetime.now(UTC).isoformat(timespec="seconds")


@tool(policy="idempotent")
def save_note(
    title: Annotated[str, Field(min_length=1, max_length=200)],
    text: Annotated[str, Field(max_length=100_000)],
    ctx: ToolContext,
) -> str:
    """Save a note for the user. Saving again with the same call overwrites, never duplicates."""
    notes = data_dir() / "notes" / ctx.user_id
    notes.mkdir(parents=True, exist_ok=True)
    # The idempotency key names the file: a retried call rewrites the same note.
    path = notes / f"{ctx.idempotency_key.replace(':', '_')}.json"
    path.write_text(json.dumps({"title": title, "text": text}, ensure_ascii=False))
    record_effect("save_note", ctx.session_id, ctx.idempotency_key, {"title": title, "text": text})
    return f"saved note {title!r}"


@tool(policy="at_most_once", requires_approval=True)
async def send_email(
    to: Annotated[str, Field(pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$", description="One email address")],
    subject: Annotated[str, Field(min_length=1, max_length=200)],
    body: Annotated[str, Field(max_length=20_000)],
    ctx: ToolContext,
) -> str:
    """Send an email on the user's behalf. A person approves each email before it goes out."""
    record_effect(
        "send_email", ctx.session_id, ctx.idempotency_key, {"to": to, "subject": subject, "body": body}
    )
    append_jsonl(
        data_dir() / "outbox.jsonl",
        {"from_user": ctx.user_id, "to": to, "subject": subject, "key": ctx.idempotency_key},
    )
    await asyncio.sleep(0)
    return f"sent to {to}"


TOOLS = [get_time, save_note, send_email]
