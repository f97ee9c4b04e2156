"""Who owns a session, and the reads that respect it.

A session belongs to the user who started it (its `user_id`). A user reaches only their
own sessions, an operator every session; any other session reads as unknown (404), so its
existence is not revealed. A run's owner never changes, so it is remembered per run id;
an id whose workflow was deleted may be started again by someone else, and its new run is
read afresh.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from temporalio.client import Client

from infra.datadir import data_dir
from infra.errors import BadRequest, SessionNotFound
from service.auth import User
from sessions import control, listing
from workflows.contract import SessionStatus

ID_SCAN = 1000  # sessions, newest first, that `session_ids` looks through


class Owners:
    def __init__(self, client: Client):
        self.client = client
        self.known: dict[str, str] = {}  # session id -> owner, for `session_ids` alone
        self.run_owners: dict[str, str] = {}  # run id -> owner, for `check`
        self._search_attributes = False
        self.tokens = listing.PageTokens.from_environment(data_dir())

    def remember(self, session_id: str, user_id: str) -> None:
        self.known[session_id] = user_id

    async def status(self, user: User, session_id: str) -> SessionStatus:
        """The session's status, if this user may see it; `SessionNotFound` otherwise."""
        found = await control.status(self.client, session_id)
        self.remember(session_id, found.user_id)
        if not user.may_see(found.user_id):
            raise SessionNotFound(session_id)
        return found

    async def check(self, user: User, session_id: str) -> None:
        """`SessionNotFound` unless this user may steer the session. The owner of its
        current run (a describe) not yet known is read from the run's start input: a
        history read, no query (no billable action, and no worker needed)."""
        h = control.handle(self.client, session_id)
        run_id = (await control.describe(h)).run_id
        owner = self.run_owners.get(run_id)
        if owner is None:
            run = self.client.get_workflow_handle(session_id, run_id=run_id)
            started, _ = await control.start_input(self.client, run)
            owner = self.run_owners[run_id] = started.user_id
            self.remember(session_id, owner)
        if not user.may_see(owner):
            raise SessionNotFound(session_id)

    async def session_ids(self, user: User, prefix: str = "") -> list[str]:
        """The ids starting with `prefix` of the sessions this user may see, newest first,
        read from visibility (no query). Without the Agent* search attributes a user who is
        not an operator gets the sessions whose owner this process knows."""
        mine = None if user.operator else user.name
        if mine is not None and not await self.has_search_attributes():
            return sorted(i for i, owner in self.known.items() if owner == mine and i.startswith(prefix))
        where = listing.Filter(user=mine).query()
        return [
            e.id async for e in self.client.list_workflows(where, limit=ID_SCAN) if e.id.startswith(prefix)
        ]

    async def has_search_attributes(self) -> bool:
        # Once registered they stay; until then, ask each time.
        self._search_attributes = self._search_attributes or await control.has_search_attributes(self.client)
        return self._search_attributes

    async def listing(
        self, user: User, status: str | None, limit: int, page_token: str | None = None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """A page of the status objects of the sessions this user may see, newest first, and
        the token to the next page (None after the last). A token is refused with any other
        filter or user than the one it was made for (`BadRequest`)."""
        made_for = {"list": "sessions", "status": status, "user": user.name}
        rows, next_token = await self.page(user, listing.Filter(status), limit, page_token, made_for)
        return [row.document() for row in rows], next_token

    async def page(
        self, user: User, which: listing.Filter, limit: int, page_token: str | None, made_for: dict[str, Any]
    ) -> tuple[list[listing.Row], str | None]:
        """A page of the rows of `which` this user may see (an operator: anyone's), and the
        sealed token to the next, made for `made_for`."""
        after = self.tokens.open(page_token, made_for) if page_token else None
        which = self.scoped(user, which)
        if which.needs_search_attributes() and not await self.has_search_attributes():
            raise BadRequest("listing by user or status needs the Agent* search attributes; see the README")
        found = await listing.page(self.client, which, limit=limit, after=after)
        rows = [row for row in found.rows if row.user is not None and user.may_see(row.user)]
        for row in rows:
            if row.found is not None:
                self.remember(row.session_id, row.found.user_id)
        return rows, self.tokens.seal(found.after, made_for) if found.after else None

    def scoped(self, user: User, which: listing.Filter) -> listing.Filter:
        """`which`, narrowed to the user's own sessions unless they are an operator."""
        return which if user.operator else dataclasses.replace(which, user=user.name)
