"""Lists of sessions, a page at a time: which sessions from Temporal visibility, each one's
figures from a replay of its history (sessions/reading.py), never from a query.

A page is one visibility page (newest first, the filter as a visibility query) and
visibility's own token to the next; the runs a session continued as new from are left
out, so each session is listed once, as its latest run. Each row is the session's status
as `status` reads it, at no billable action; a session this process cannot replay (its
worker runs other workflow code, or no workflow task of its run has completed) is listed
from its search attributes, with why (`unavailable`) and the time those figures were
indexed (`as_of`). Nothing waits on a worker, so no row is ever guessed for a timeout.

Tokens that leave the process (the API, MCP, A2A) are sealed (`PageTokens`): an HMAC over
visibility's token and the filter and user it was made for, so a token is opaque and is
refused with any other filter or user.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import os
import secrets
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus
from temporalio.service import RPCError

from infra.errors import AgentError, BadRequest
from sessions import control
from sessions.replays import CannotReplay
from workflows import search
from workflows.contract import SessionStatus

MAX_PAGE = 1000  # rows a visibility page holds at most
ROWS_AT_ONCE = 16  # rows read concurrently (their replays run one at a time)
# What a visibility filter cannot say: decided from each row's status.
STUCK = "stuck"


@dataclass(frozen=True)
class Filter:
    """Which sessions: by status (a session's, or `stuck`), by user (None: anyone's), and
    among or outside a set of statuses (A2A's task states)."""

    status: str | None = None
    user: str | None = None
    among: tuple[str, ...] = ()
    outside: tuple[str, ...] = ()

    def query(self) -> str:
        clauses = ["WorkflowType = 'AgentWorkflow'", "ExecutionStatus != 'ContinuedAsNew'"]
        if self.status not in (None, STUCK):
            clauses.append(f"AgentStatus = {json.dumps(self.status)}")
        if self.among:
            clauses.append(f"AgentStatus IN ({', '.join(json.dumps(s) for s in self.among)})")
        if self.outside:
            clauses.append(f"AgentStatus NOT IN ({', '.join(json.dumps(s) for s in self.outside)})")
        if self.user is not None:
            clauses.append(f"AgentUser = {json.dumps(self.user)}")
        if self.status == STUCK:
            clauses.append("ExecutionStatus = 'Running'")
        return " AND ".join(clauses)

    def needs_search_attributes(self) -> bool:
        return self.status not in (None, STUCK) or self.user is not None or bool(self.among or self.outside)

    def keeps(self, row: Row) -> bool:
        """Visibility lags the session: the row's own status decides."""
        status = row.status
        return (
            (self.status is None or status == self.status)
            and (not self.among or status in self.among)
            and (not self.outside or status not in self.outside)
        )


@dataclass
class Row:
    """One session: its status as `status` reads it, or what visibility says of it and why."""

    execution: WorkflowExecution
    found: SessionStatus | None
    unavailable: str | None = None
    as_of: datetime | None = None  # when visibility's figures were indexed, if `found` is None

    @property
    def session_id(self) -> str:
        return self.execution.id

    @property
    def status(self) -> str | None:
        if self.found is not None:
            return self.found.status
        attrs = self.execution.typed_search_attributes
        return attrs.get(search.AGENT_STATUS) or (
            self.execution.status.name.lower() if self.execution.status else None
        )

    @property
    def user(self) -> str | None:
        return (
            self.found.user_id
            if self.found is not None
            else self.execution.typed_search_attributes.get(search.AGENT_USER)
        )

    def summary(self) -> dict[str, Any]:
        """The row `client.py list` prints: the columns, and `stuck` when it is."""
        attrs, found = self.execution.typed_search_attributes, self.found
        row: dict[str, Any] = {
            "session_id": self.session_id,
            "status": self.status,
            "steps": found.steps if found else attrs.get(search.AGENT_STEPS),
            "tokens": found.usage.total() if found else attrs.get(search.AGENT_TOKENS),
            "pending_approvals": len(found.pending_approvals)
            if found
            else attrs.get(search.AGENT_PENDING_APPROVALS),
            "user": self.user,
            "started": self.execution.start_time.isoformat() if self.execution.start_time else None,
            "actions": found.temporal_actions if found else None,
        }
        if found is not None and found.stuck is not None:
            row["stuck"] = found.stuck.model_dump(mode="json")
        if found is None:
            row["unavailable"] = self.unavailable
            row["as_of"] = self.as_of.isoformat() if self.as_of else None
        return row

    def document(self) -> dict[str, Any]:
        """The row the API, MCP and A2A answer: the status object, or what is known and why not more."""
        if self.found is not None:
            return self.found.model_dump(mode="json")
        attrs = self.execution.typed_search_attributes
        return {
            "session_id": self.session_id, "status": self.status, "steps": attrs.get(search.AGENT_STEPS) or 0,
            "user_id": self.user, "started_at": self.execution.start_time.isoformat(),
            "tokens": attrs.get(search.AGENT_TOKENS), "usage": None, "cost_usd": None, "temporal_actions": None,
            "pending_approvals": [], "unavailable": self.unavailable,
            "as_of": self.as_of.isoformat() if self.as_of else None,
        }  # fmt: skip


@dataclass
class Page:
    rows: list[Row]
    after: bytes | None  # visibility's token to the next page; None at the end


async def page(client: Client, which: Filter, *, limit: int, after: bytes | None = None) -> Page:
    """Up to `limit` sessions (fewer when the filter drops some the index still holds), newest
    first, from where `after` left off. A filter on the Agent* search attributes needs them
    registered (`check_filter`)."""
    found = client.list_workflows(
        which.query(), page_size=max(1, min(limit, MAX_PAGE)), next_page_token=after
    )
    await found.fetch_next_page()
    gate = asyncio.Semaphore(ROWS_AT_ONCE)

    async def row(execution: WorkflowExecution) -> Row:
        async with gate:
            return await read_row(client, execution)

    rows = await asyncio.gather(*(row(e) for e in found.current_page or []))
    return Page([r for r in rows if which.keeps(r)], found.next_page_token)


async def count(client: Client, which: Filter) -> int:
    """How many sessions the filter's visibility query finds (a row's own status may differ)."""
    return (await client.count_workflows(which.query())).count


async def rows(client: Client, which: Filter, *, limit: int, page_size: int = 200) -> list[Row]:
    """The first `limit` sessions, read a page at a time."""
    await check_filter(client, which)
    found: list[Row] = []
    after: bytes | None = None
    while len(found) < limit:
        next_page = await page(client, which, limit=min(page_size, limit - len(found)), after=after)
        found += next_page.rows
        if next_page.after is None:
            break
        after = next_page.after
    return found[:limit]


async def check_filter(client: Client, which: Filter) -> None:
    """`BadRequest` when the filter needs the Agent* search attributes and the namespace lacks them."""
    if which.needs_search_attributes() and not await control.has_search_attributes(client):
        raise BadRequest("filtering needs the Agent* search attributes on this namespace; see the README")


async def read_row(client: Client, execution: WorkflowExecution) -> Row:
    """One session's row: its status as `status` reads it (no query), or visibility's figures."""
    h = control.handle(client, execution.id)
    try:
        running = execution.status == WorkflowExecutionStatus.RUNNING
        described = await control.describe(h) if running else execution
        if described.run_id != execution.run_id:  # continued as new since the index said
            described = await control.describe(h)
        return Row(execution, await control.status_of(client, h, described, ask_worker=False))
    except CannotReplay as why:
        reason = f"not replayable here: {why}"
    except (AgentError, RPCError) as err:
        reason = str(err) or type(err).__name__
    except Exception as err:  # its payloads cannot be read here: one row says so, the list goes on
        reason = f"cannot read its status: {type(err).__name__}: {err}".splitlines()[0]
    return Row(execution, None, reason, await _indexed_at(client, execution))


async def _indexed_at(client: Client, execution: WorkflowExecution) -> datetime | None:
    """When the run last indexed its figures: its last search-attribute upsert, else its start."""
    latest = execution.start_time
    try:
        async for event in client.get_workflow_handle(
            execution.id, run_id=execution.run_id
        ).fetch_history_events():
            if event.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
                latest = event.event_time.ToDatetime().replace(tzinfo=UTC)
    except RPCError:
        pass
    return latest


# ---- sealed tokens -------------------------------------------------------------------------

KEY_ENV = "AGENT_PAGE_TOKEN_KEY"
KEY_FILE = "page-token.key"


class PageTokens:
    """Page tokens a caller can hand back but not read into another filter or user: visibility's
    token (or a position) and what it was made for, under an HMAC with the service's key."""

    def __init__(self, key: bytes):
        self.key = key

    @classmethod
    def from_environment(cls, data_dir: Path) -> PageTokens:
        """`AGENT_PAGE_TOKEN_KEY`, else a key made once in the data directory (shared by every
        api.py on it, kept across restarts)."""
        if configured := os.environ.get(KEY_ENV):
            return cls(configured.encode())
        path = data_dir / KEY_FILE
        if not path.exists():
            # Written whole under another name, then linked in: of two processes starting
            # at once, one key wins and both read it.
            fd, made = tempfile.mkstemp(dir=data_dir, prefix=".page-token-")
            with os.fdopen(fd, "wb") as out:
                out.write(secrets.token_bytes(32))
            try:
                os.link(made, path)
            except FileExistsError:
                pass
            finally:
                os.unlink(made)
        return cls(path.read_bytes())

    def seal(self, position: bytes, made_for: dict[str, Any]) -> str:
        body = json.dumps({"p": base64.b64encode(position).decode(), "f": made_for}, sort_keys=True).encode()
        return f"{_b64(body)}.{_b64(self._mac(body))}"

    def open(self, token: str, made_for: dict[str, Any]) -> bytes:
        """The position a token names; `BadRequest` unless it is one of ours, made for `made_for`."""
        head, _, mac = token.partition(".")
        try:
            body = _unb64(head)
            valid = hmac.compare_digest(_unb64(mac), self._mac(body))
            sealed = json.loads(body) if valid else None
        except ValueError:
            sealed = None
        if not isinstance(sealed, dict) or not isinstance(sealed.get("p"), str):
            raise BadRequest("the page token is not one this service made (or it has been altered)")
        if sealed.get("f") != json.loads(json.dumps(made_for, sort_keys=True)):
            raise BadRequest(
                "the page token was made for another filter or user: list again from the first page"
            )
        return base64.b64decode(sealed["p"])

    def _mac(self, body: bytes) -> bytes:
        return hmac.new(self.key, body, hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError) as err:
        raise ValueError("not base64") from err
