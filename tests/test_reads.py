"""Reads that cost nothing and lists that page.

`status`, `history` and `state` come from a replay of the session's history in the reading
process (sessions/reading.py), never from a query, and answer what the query answers; a
poll loop through `client.py status --json` and `GET /v1/sessions/{id}` adds no billable
action (the dev server's own counters). Every list pages (sessions/listing.py): over HTTP,
MCP, A2A's ListTasks and `client.py list`, each session once, under a token refused with
another filter or user, and no row is unknown because a worker is away."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from temporalio.client import Client

from bench.economy import metrics_url, scrape
from devservers.fakemodel import FakeModelServer
from sessions import control, listing
from tests.conftest import Harness, answer, model_activities, tool_use
from tests.support.api import TOKENS, ApiProcess, module_api, wait_for
from tests.support.reliability import record
from tests.support.tools import TOOLS
from tests.test_mcp_server import result
from tests.test_mcp_server_http import over_http
from tests.test_watch import EMAIL, run_cli
from worker import build_worker
from workflows.agent import AgentWorkflow
from workflows.contract import Decision, SessionInput, SessionStatus

AREA = "Free reads and paged lists"
pytestmark = pytest.mark.xdist_group("reads-api")
# Requests that cost a billable action when a read makes them; none may.
BILLED_READS = (
    "requests:QueryWorkflow",
    "requests:UpdateWorkflowExecution",
    "requests:SignalWorkflowExecution",
)


api = module_api("reads-api")


def cli_of(api: ApiProcess, client: Client, fake_model: FakeModelServer) -> Harness:
    """What `run_cli` needs to run `client.py` against the service's server and queue."""
    return Harness(client, fake_model, api.env["TEMPORAL_TASK_QUEUE"])


async def read_until(client: Client, session_id: str, status: str, timeout: float = 30) -> SessionStatus:
    """The session's status once it is `status`, read without a query."""
    deadline = asyncio.get_running_loop().time() + timeout
    while (found := await control.status(client, session_id)).status != status:
        assert asyncio.get_running_loop().time() < deadline, f"still {found.status}, wanted {status}"
        await asyncio.sleep(0.1)
    return found


async def start_many(
    client: Client, queue: str, fake_model: FakeModelServer, user: str, count: int
) -> set[str]:
    """`count` sessions of `user` that answer at once, indexed for the list filters."""
    ids = {f"page-{uuid.uuid4().hex[:10]}" for _ in range(count)}
    for session_id in ids:
        fake_model.script.set(session_id, [answer("done")])
    await asyncio.gather(*(
        control.start(client, SessionInput(goal="say done", user_id=user, search_attributes=True), session_id,
                      task_queue=queue)
        for session_id in ids
    ))  # fmt: skip
    return ids


async def indexed(client: Client, which: listing.Filter, count: int) -> None:
    """Visibility is eventually consistent: wait until it finds `count` sessions for the filter."""

    async def check() -> bool:
        return await listing.count(client, which) >= count

    await wait_for(check, 120, f"{count} sessions indexed for {which}")


# ---- free reads ------------------------------------------------------------------------------


async def test_a_read_answers_what_the_query_answers(harness: Harness):
    handle = await harness.start(
        [tool_use("get_time", {"timezone_name": "UTC"}, id="t1"), tool_use("send_email", EMAIL, id="e1"),
         answer("Sent.")],
    )  # fmt: skip
    await read_until(harness.client, handle.id, "waiting_approval")
    assert await control.status(harness.client, handle.id) == await handle.query(AgentWorkflow.status)
    assert await control.state(harness.client, handle.id) == await handle.query(AgentWorkflow.state)
    assert await control.history(harness.client, handle.id) == await handle.query(AgentWorkflow.history)
    await handle.execute_update(AgentWorkflow.approve_call, Decision(tool_use_id="e1"))
    ended: SessionStatus = await asyncio.wait_for(handle.result(), 60)
    assert (await control.history(harness.client, handle.id)).status == ended


async def test_a_status_poll_loop_adds_no_action(
    api: ApiProcess, client: Client, fake_model: FakeModelServer, dev_server
):
    """A session polled at one approval, then, once approved, at the next one (its history
    grown, so read again): through `client.py status --json` and `GET /v1/sessions/{id}`,
    no query, update or signal reaches the server while it is polled."""
    session_id = f"poll-{uuid.uuid4().hex[:10]}"
    steps = [tool_use("get_time", {"timezone_name": "UTC"}, id=f"t{i}") for i in range(3)]
    fake_model.script.set(session_id, [tool_use("send_email", EMAIL, id="e1"), *steps,
                                       tool_use("send_email", EMAIL, id="e2"), answer("Sent.")])  # fmt: skip
    cli = cli_of(api, client, fake_model)
    url = metrics_url(dev_server)
    grew = dict.fromkeys(BILLED_READS, 0)
    seen: list[tuple[int, str]] = []
    by_http: dict[str, Any] = {}
    async with api.client("alice") as alice:
        started = await alice.post("/v1/sessions", json={"goal": "poll me", "session_id": session_id})
        assert started.status_code == 201, started.text
        for call in ("e1", "e2"):
            await wait_for(lambda c=call: _pending(alice, session_id, c), 60, f"the approval of {call}")
            await asyncio.sleep(1.0)  # the server's counters lag its requests
            before = scrape(url)
            for _ in range(5):
                code, out, err = await run_cli(cli, "status", session_id, "--json")
                assert code == 0, err
                by_cli = json.loads(out)
                by_http = (await alice.get(f"/v1/sessions/{session_id}")).json()
                seen += [(by_cli["steps"], by_cli["status"]), (by_http["steps"], by_http["status"])]
            await asyncio.sleep(1.0)
            after = scrape(url)
            grew = {k: grew[k] + int(after.get(k, 0) - before.get(k, 0)) for k in BILLED_READS}
            if call == "e2":
                queried = await client.get_workflow_handle(session_id).query(AgentWorkflow.status)
                assert SessionStatus.model_validate(by_http) == queried
            approved = await alice.post(f"/v1/sessions/{session_id}/approve", json={"tool_use_id": call})
            assert approved.status_code == 200, approved.text
    assert grew == dict.fromkeys(BILLED_READS, 0), grew
    assert sorted(set(seen)) == [(1, "waiting_approval"), (5, "waiting_approval")], seen
    record(
        AREA,
        "a session polled 10 times through `client.py status --json` and 10 times through "
        "`GET /v1/sessions/{id}`, at one approval and, after more steps, at the next",
        "no query, update or signal reached the server while it was polled (its request counters); "
        "the status equals what a query of the worker answers",
        {"polls": 20, "billed reads": sum(grew.values())},
    )


async def _pending(http: httpx.AsyncClient, session_id: str, tool_use_id: str) -> bool:
    found = (await http.get(f"/v1/sessions/{session_id}")).json()
    return [p["tool_use_id"] for p in found["pending_approvals"]] == [tool_use_id]


async def _status_if(http: httpx.AsyncClient, session_id: str, status: str) -> dict[str, Any] | None:
    found = (await http.get(f"/v1/sessions/{session_id}")).json()
    return found if found["status"] == status else None


# ---- paged lists ------------------------------------------------------------------------------


async def test_paging_returns_each_session_once(api: ApiProcess, client: Client, fake_model: FakeModelServer):
    """30 sessions, 7 a page: HTTP, MCP and the client library each return every one once."""
    queue = api.env["TEMPORAL_TASK_QUEUE"]
    ids = await start_many(client, queue, fake_model, "alice", 30)
    for session_id in ids:
        await asyncio.wait_for(client.get_workflow_handle(session_id).result(), 180)
    await indexed(client, listing.Filter(status="completed", user="alice"), 30)

    async with api.client("alice") as alice:
        pages, token = [], None
        while True:
            params = {"limit": 7, "status": "completed", **({"page_token": token} if token else {})}
            answered = (await alice.get("/v1/sessions", params=params)).json()
            pages.append([s["session_id"] for s in answered["sessions"]])
            assert len(pages[-1]) <= 7
            if (token := answered["next_page_token"]) is None:
                break
    listed = [s for page in pages for s in page]
    assert len(listed) == len(set(listed)) and ids <= set(listed), pages
    assert len(pages) >= 5

    async with over_http(api, "alice") as mcp:
        found: list[str] = []
        cursor = None
        while True:
            args = {"limit": 7, "status": "completed", **({"cursor": cursor} if cursor else {})}
            page = result(await mcp.call_tool("list_sessions", args))
            found += [s["session_id"] for s in page["sessions"]]
            if (cursor := page["next_cursor"]) is None:
                break
    assert len(found) == len(set(found)) and ids <= set(found)

    rows = await listing.rows(
        client, listing.Filter(status="completed", user="alice"), limit=10**6, page_size=7
    )
    by_library = [r.session_id for r in rows]
    assert len(by_library) == len(set(by_library)) and ids <= set(by_library)
    code, out, err = await run_cli(cli_of(api, client, fake_model), "list", "--json", "--user", "alice",
                                   "--status", "completed", "--limit", "1000")  # fmt: skip
    assert code == 0, err
    by_cli = [json.loads(line)["session_id"] for line in out.splitlines()]
    assert len(by_cli) == len(set(by_cli)) and ids <= set(by_cli)
    assert all(json.loads(line)["actions"] for line in out.splitlines())


async def test_a_page_token_is_refused_with_another_filter_or_user(
    api: ApiProcess, client: Client, fake_model: FakeModelServer
):
    # Two sessions of its own, so the operator's first page of one has a next page.
    await start_many(client, api.env["TEMPORAL_TASK_QUEUE"], fake_model, "alice", 2)
    await indexed(client, listing.Filter(), 2)
    async with api.client("alice") as alice, api.client("bob") as bob, api.client("olga") as olga:
        first = await olga.get("/v1/sessions", params={"limit": 1})
        token = first.json()["next_page_token"]
        assert token, "the operator sees more than one session"
        for http, params in [
            (olga, {"limit": 1, "status": "completed", "page_token": token}),  # another filter
            (alice, {"limit": 1, "page_token": token}),  # another user
            (bob, {"limit": 1, "page_token": token}),
            (olga, {"limit": 1, "page_token": token[:-2] + ("AA" if token[-2:] != "AA" else "BB")}),
            (olga, {"limit": 1, "page_token": "not-a-token"}),
        ]:
            refused = await http.get("/v1/sessions", params=params)
            assert refused.status_code == 400, refused.text
            assert refused.json()["error"]["message"].startswith("the page token")
        again = await olga.get("/v1/sessions", params={"limit": 1, "page_token": token})
        assert again.status_code == 200 and again.json()["sessions"] != first.json()["sessions"]


async def test_a_list_never_shows_a_row_unknown_while_its_worker_is_away(
    api: ApiProcess, client: Client, fake_model: FakeModelServer, data_dir: Path
):
    """Sessions waiting for approval whose worker has gone: each row still has its figures
    (read from history), in `client.py list` and over HTTP."""
    queue = f"away-{uuid.uuid4().hex[:8]}"
    ids = [f"away-{uuid.uuid4().hex[:10]}" for _ in range(3)]
    for session_id in ids:
        fake_model.script.set(session_id, [tool_use("send_email", EMAIL, id="e1"), answer("Sent.")])
    async with build_worker(client, TOOLS, queue=queue, model=model_activities(fake_model, data_dir)):
        for session_id in ids:
            await control.start(client, SessionInput(goal="email", user_id="alice", search_attributes=True),
                                session_id, task_queue=queue)  # fmt: skip
        for session_id in ids:
            await read_until(client, session_id, "waiting_approval")
    await indexed(client, listing.Filter(status="waiting_approval", user="alice"), 3)

    code, out, err = await run_cli(
        cli_of(api, client, fake_model), "list", "--json", "--status", "waiting_approval"
    )
    assert code == 0, err
    rows = {r["session_id"]: r for r in map(json.loads, out.splitlines())}
    for session_id in ids:
        row = rows[session_id]
        assert row["actions"] and row["pending_approvals"] == 1 and "unavailable" not in row, row
    async with api.client("alice") as alice:
        found = (await alice.get("/v1/sessions", params={"status": "waiting_approval", "limit": 200})).json()
    listed = {s["session_id"]: s for s in found["sessions"]}
    for session_id in ids:
        row = listed[session_id]
        assert row["temporal_actions"] and "unavailable" not in row and row["pending_approvals"], row
    for session_id in ids:
        await client.get_workflow_handle(session_id).terminate(reason="test done")


# ---- A2A ListTasks -----------------------------------------------------------------------------


async def list_tasks(api: ApiProcess, user: str, **params: Any) -> dict[str, Any]:
    """A raw JSON-RPC ListTasks (A2A 1.0): the answer's `result` or `error`."""
    async with httpx.AsyncClient(timeout=60) as http:
        answered = await http.post(
            f"{api.url}/a2a",
            headers={"Authorization": f"Bearer {TOKENS[user]}", "A2A-Version": "1.0"},
            json={"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": params},
        )
    assert answered.status_code == 200, answered.text
    return answered.json()


async def test_list_tasks_keeps_the_a2a_rules(api: ApiProcess, client: Client, fake_model: FakeModelServer):
    """ListTasks as A2A 1.0 defines it: an empty list for an unknown context, -32602 for each
    invalid parameter, an opaque cursor no other filter or user can use, the true totalSize."""
    unknown = await list_tasks(api, "alice", contextId=f"nobody-{uuid.uuid4().hex[:8]}")
    assert unknown["result"]["tasks"] == [] and unknown["result"].get("totalSize", 0) == 0, unknown
    for bad in [{"pageSize": -1}, {"pageSize": 0}, {"pageSize": 101}, {"historyLength": -1},
                {"pageToken": "not-a-token"}, {"status": "TASK_STATE_NOT_A_STATE"}, {"status": 99}]:  # fmt: skip
        refused = await list_tasks(api, "alice", **bad)
        assert refused.get("error", {}).get("code") == -32602, (bad, refused)

    # bob alone has these: every one of his completed tasks, 4 a page, each once.
    ids = await start_many(client, api.env["TEMPORAL_TASK_QUEUE"], fake_model, "bob", 9)
    for session_id in ids:
        await asyncio.wait_for(client.get_workflow_handle(session_id).result(), 180)
    which = listing.Filter(user="bob", among=("completed", "waiting_input"))
    await indexed(client, which, 9)
    total = await listing.count(client, which)
    seen: list[str] = []
    token = ""
    while True:
        page = (await list_tasks(api, "bob", pageSize=4, status="TASK_STATE_COMPLETED", pageToken=token))[
            "result"
        ]
        assert len(page["tasks"]) <= 4 and page["totalSize"] == total, page
        seen += [t["contextId"] for t in page["tasks"]]
        if not (token := page.get("nextPageToken", "")):
            break
        if len(seen) == 4:  # a cursor is good for its filter and user only
            for user, params in [("alice", {}), ("bob", {"status": "TASK_STATE_WORKING"})]:
                forged = await list_tasks(api, user, pageSize=4, pageToken=token,
                                          **({"status": "TASK_STATE_COMPLETED"} | params))  # fmt: skip
                assert forged.get("error", {}).get("code") == -32602, forged
    assert len(seen) == len(set(seen)) == total and ids <= set(seen)

    # A context's tasks page too: a chat of three turns, two a page.
    chat = f"turns-{uuid.uuid4().hex[:8]}"
    fake_model.script.set(chat, [answer("one"), answer("two"), answer("three")])
    async with api.client("alice") as alice:
        await alice.post("/v1/sessions", json={"goal": "first", "session_id": chat, "chat": True})
        for text in ("second", "third"):
            await wait_for(lambda: _status_if(alice, chat, "waiting_input"), what="the chat's answer")
            sent = await alice.post(f"/v1/sessions/{chat}/messages", json={"text": text})
            assert sent.status_code == 200, sent.text
        await wait_for(lambda: _turns_answered(alice, chat, 3), what="the third answer")
    first = (await list_tasks(api, "alice", contextId=chat, pageSize=2))["result"]
    assert [t["id"] for t in first["tasks"]] == [f"{chat}.turn-1", f"{chat}.turn-2"] and first[
        "totalSize"
    ] == 3
    rest = (await list_tasks(api, "alice", contextId=chat, pageSize=2, pageToken=first["nextPageToken"]))[
        "result"
    ]
    assert [t["id"] for t in rest["tasks"]] == [f"{chat}.turn-3"] and not rest.get("nextPageToken")
    theirs = await list_tasks(api, "bob", contextId=chat, pageSize=2, pageToken=first["nextPageToken"])
    assert theirs.get("error", {}).get("code") == -32602, theirs


async def _turns_answered(http: httpx.AsyncClient, session_id: str, turns: int) -> bool:
    found = (await http.get(f"/v1/sessions/{session_id}")).json()
    return found["status"] == "waiting_input" and found["user_turns"] == turns
