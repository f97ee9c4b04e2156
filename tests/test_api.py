"""The agent service over HTTP: a real `python api.py` process, a real dev server and a
worker on the queue the service starts sessions on. Every endpoint, every error code, who
may see and steer what, and the live events (resumed after a cut, fanned out to 50)."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy

from devservers import temporal_server
from devservers.fakemodel import FakeModelServer
from sessions import control
from tests.conftest import answer, tool_use
from tests.support.api import (
    TOKENS,
    ApiProcess,
    Sse,
    api_env,
    collect_events,
    module_api,
    read_sse,
    start_api,
    wait_for,
)  # fmt: skip
from workflows.contract import SessionInput

EMAIL = {"to": "team@example.com", "subject": "hi", "body": "x"}
POLL_UPDATE = "__temporal_workflow_stream_poll"
# One `python api.py` for the module (the `api` fixture): its tests run in one xdist process.
pytestmark = pytest.mark.xdist_group("api")


api = module_api("api")


def new_id() -> str:
    return f"api-{uuid.uuid4().hex[:10]}"


async def start(http: httpx.AsyncClient, fake_model: FakeModelServer, turns: list[dict[str, Any]] | None,
                **body: Any) -> dict[str, Any]:  # fmt: skip
    session_id = body.pop("session_id", None) or new_id()
    if turns is not None:
        fake_model.script.set(session_id, turns)
    response = await http.post(
        "/v1/sessions", json={"goal": "do the thing", "session_id": session_id, **body}
    )
    assert response.status_code == 201, response.text
    return response.json()


async def wait_status(
    http: httpx.AsyncClient, session_id: str, status: str, timeout: float = 30
) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        found = (await http.get(f"/v1/sessions/{session_id}")).json()
        return found if found["status"] == status else None

    return await wait_for(check, timeout, f"session {session_id} to be {status}")


def assert_error(response: httpx.Response, status: int, kind: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["message"] and error["type"]
    if kind is not None:
        assert error["type"] == kind, error
    return error


# ---- authentication -----------------------------------------------------------------------


async def test_health_needs_no_token_and_everything_else_does(api: ApiProcess):
    async with api.client(None) as anonymous, api.client("alice") as alice:
        assert (await anonymous.get("/healthz")).json() == {"status": "ok"}
        for path in ["/v1/sessions", "/v1/sessions/x", "/v1/sessions/x/events", "/openapi.json", "/docs", "/",
                     "/static/app.js"]:  # fmt: skip
            assert_error(await anonymous.get(path), 401, "Unauthorized")
            assert_error(await anonymous.get(path, headers={"Authorization": "Bearer wrong"}), 401)
        assert_error(await anonymous.post("/v1/sessions", json={"goal": "x"}), 401)
        me = (await alice.get("/v1/me")).json()
        assert me["user"] == "alice" and me["operator"] is False


async def test_openapi_and_docs_describe_every_endpoint(api: ApiProcess):
    async with api.client("alice") as alice:
        schema = (await alice.get("/openapi.json")).json()
        paths = schema["paths"]
        for action in [
            "approve",
            "deny",
            "pause",
            "resume",
            "cancel",
            "messages",
            "close",
            "events",
            "history",
            "limits",
        ]:
            assert f"/v1/sessions/{{session_id}}/{action}" in paths
        assert set(paths["/v1/sessions"]) == {"get", "post"}
        assert "HTTPBearer" in schema["components"]["securitySchemes"]
        ok = paths["/v1/sessions/{session_id}/approve"]["post"]["responses"]["200"]["content"][
            "application/json"
        ]
        assert ok["schema"]["$ref"].endswith("/SessionStatus")
        assert "StartSession" in schema["components"]["schemas"]
        docs = await alice.get("/docs")
        assert docs.status_code == 200 and "swagger" in docs.text.lower()


async def test_the_browser_trades_the_token_for_a_strict_cookie(api: ApiProcess, fake_model: FakeModelServer):
    async with api.client(None, follow_redirects=False) as browser:
        assert_error(await browser.get("/", params={"token": "wrong"}), 401)
        response = await browser.get("/", params={"token": TOKENS["alice"]})
        assert response.status_code == 303 and response.headers["location"] == "/"
        cookie = response.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and TOKENS["alice"] not in cookie
        page = await browser.get("/")
        assert page.status_code == 200 and "<html" in page.text.lower()
        assert (await browser.get("/v1/me")).json()["user"] == "alice"
        session_id = new_id()
        fake_model.script.set(session_id, [answer("done")])
        # A cross-site form can post with the cookie but not as JSON: refused, nothing started.
        form = await browser.post("/v1/sessions", data={"goal": "x", "session_id": session_id})
        assert_error(form, 403, "Forbidden")
        assert_error(await browser.get(f"/v1/sessions/{session_id}"), 404)
        started = await browser.post("/v1/sessions", json={"goal": "x", "session_id": session_id})
        assert started.status_code == 201 and started.json()["user_id"] == "alice"
    async with api.client(None, headers={"Cookie": "agent_session=alice.forged"}) as forger:
        assert_error(await forger.get("/v1/me"), 401)


# ---- sessions -------------------------------------------------------------------------------


async def test_a_session_started_read_approved_and_listed(api: ApiProcess, fake_model: FakeModelServer):
    async with api.client("alice") as alice, api.client("bob") as bob, api.client("olga") as olga:
        started = await start(alice, fake_model, [
            tool_use("send_email", EMAIL, id="e1", text="Emailing the team."), answer("Sent it."),
        ], max_steps=5)  # fmt: skip
        session_id = started["session_id"]
        assert started["user_id"] == "alice" and started["limits"]["max_steps"] == 5
        assert_error(
            await alice.post("/v1/sessions", json={"goal": "again", "session_id": session_id}),
            409,
            "SessionExists",
        )
        assert_error(await bob.post("/v1/sessions", json={"goal": "mine", "session_id": session_id}), 409)
        waiting = await wait_status(alice, session_id, "waiting_approval")
        assert waiting["pending_approvals"][0]["input"] == EMAIL
        assert_error(
            await alice.post(f"/v1/sessions/{session_id}/approve", json={"tool_use_id": "nope"}),
            409,
            "Rejected",
        )

        approved = await alice.post(f"/v1/sessions/{session_id}/approve", json={"tool_use_id": "e1"})
        assert approved.status_code == 200, approved.text
        assert approved.json()["session_id"] == session_id and not approved.json()["pending_approvals"]
        assert_error(await alice.post(f"/v1/sessions/{session_id}/approve", json={"tool_use_id": "e1"}), 409)
        done = await wait_status(alice, session_id, "completed")
        assert done["answer"].endswith("Sent it.")

        history = (await alice.get(f"/v1/sessions/{session_id}/history")).json()
        [call] = history["tool_calls"]
        assert call["status"] == "done" and call["output"] == "sent to team@example.com"
        assert history["trace"][0]["tool_calls"][0]["tool_use_id"] == "e1"
        assert history["messages"][0]["content"][0]["text"] == "do the thing"

        async def listed(http: httpx.AsyncClient) -> list[str]:
            return [
                s["session_id"]
                for s in (await http.get("/v1/sessions", params={"limit": 200})).json()["sessions"]
            ]

        await wait_for(lambda: _contains(listed(alice), session_id), what="the session in alice's list")
        await wait_for(lambda: _contains(listed(olga), session_id), what="the session in olga's list")
        assert session_id not in await listed(bob)
        completed = (await alice.get("/v1/sessions", params={"status": "completed"})).json()["sessions"]
        assert session_id in [s["session_id"] for s in completed]
        assert all(s["status"] == "completed" and s["user_id"] == "alice" for s in completed)


async def test_decisions_record_the_edit_and_who_decided(api: ApiProcess, fake_model: FakeModelServer):
    async with api.client("alice") as alice, api.client("olga") as olga:
        started = await start(alice, fake_model, [
            tool_use("send_email", EMAIL, id="e1"), tool_use("send_email", EMAIL, id="e2"), answer("ok"),
        ])  # fmt: skip
        session_id = started["session_id"]
        await wait_status(alice, session_id, "waiting_approval")
        broken = {"tool_use_id": "e1", "input": {**EMAIL, "to": "not an address"}}
        bad_edit = await alice.post(f"/v1/sessions/{session_id}/approve", json=broken)
        assert "to" in assert_error(bad_edit, 422, "InvalidInput")["message"]
        assert (await alice.get(f"/v1/sessions/{session_id}")).json()["status"] == "waiting_approval"
        edited = {**EMAIL, "to": "boss@example.com"}
        approved = await alice.post(
            f"/v1/sessions/{session_id}/approve", json={"tool_use_id": "e1", "input": edited}
        )
        assert approved.status_code == 200, approved.text
        await wait_for(lambda: _pending(alice, session_id, "e2"), what="the second approval")
        assert (
            await olga.post(
                f"/v1/sessions/{session_id}/deny", json={"tool_use_id": "e2", "reason": "once is enough"}
            )
        ).status_code == 200
        await wait_status(alice, session_id, "completed")
        first, second = (await alice.get(f"/v1/sessions/{session_id}/history")).json()["tool_calls"]
        assert first["approved_input"] == edited and first["output"].endswith("sent to boss@example.com")
        assert "a person edited the input" in first["output"]
        assert first["decided_by"] == "alice"
        assert second["status"] == "denied" and second["decided_by"] == "olga"


async def _pending(http: httpx.AsyncClient, session_id: str, tool_use_id: str) -> bool:
    found = (await http.get(f"/v1/sessions/{session_id}")).json()
    return [p["tool_use_id"] for p in found["pending_approvals"]] == [tool_use_id]


async def test_a_session_no_worker_answers_for_is_listed_from_its_search_attributes(
    api: ApiProcess, client: Client
):
    session_id = new_id()
    started = SessionInput(goal="nobody runs this", user_id="alice", search_attributes=True)
    handle = await control.start(client, started, session_id, task_queue=f"nobody-{session_id}")
    try:
        async with api.client("alice") as alice, api.client("bob") as bob:

            async def row() -> dict[str, Any] | None:
                found = (await alice.get("/v1/sessions", params={"limit": 200})).json()["sessions"]
                return next((s for s in found if s["session_id"] == session_id), None)

            listed = await wait_for(row, what="the session in alice's list")
            assert listed["status"] == "running" and listed["user_id"] == "alice" and listed["unavailable"]
            assert session_id not in [
                s["session_id"] for s in (await bob.get("/v1/sessions")).json()["sessions"]
            ]
    finally:
        await handle.terminate(reason="test done")


async def _contains(listing, session_id: str) -> bool:
    return session_id in await listing


async def test_another_users_session_is_unknown_to_them_everywhere(
    api: ApiProcess, fake_model: FakeModelServer
):
    async with api.client("alice") as alice, api.client("bob") as bob, api.client("olga") as olga:
        started = await start(alice, fake_model, [tool_use("send_email", EMAIL, id="e1"), answer("ok")])
        session_id = started["session_id"]
        await wait_status(alice, session_id, "waiting_approval")
        unknown = (await bob.get("/v1/sessions/no-such-session")).json()
        for method, path, body in [
            ("GET", "", None), ("GET", "/history", None), ("GET", "/events", None),
            ("POST", "/approve", {"tool_use_id": "e1"}), ("POST", "/deny", {"tool_use_id": "e1"}),
            ("POST", "/pause", None), ("POST", "/resume", None), ("POST", "/cancel", {}),
            ("POST", "/messages", {"text": "hi"}), ("POST", "/close", None),
            ("POST", "/events", {"name": "build"}), ("POST", "/limits", {"decline": True}),
            ("POST", "/limits", {"name": "max_steps", "value": 50}),
        ]:  # fmt: skip
            response = await bob.request(method, f"/v1/sessions/{session_id}{path}", json=body)
            error = assert_error(response, 404, "SessionNotFound")
            # Word for word what an unknown id gets, but for the id itself.
            assert error["message"].replace(session_id, "no-such-session") == unknown["error"]["message"]
        assert (await alice.get(f"/v1/sessions/{session_id}")).json()["status"] == "waiting_approval"
        refused = await alice.post(f"/v1/sessions/{session_id}/limits", json={"decline": True})
        assert "is not waiting at a limit" in assert_error(refused, 409)["message"]
        assert_error(await alice.post(f"/v1/sessions/{session_id}/limits", json={"name": "max_steps"}), 422)
        raised = await alice.post(
            f"/v1/sessions/{session_id}/limits", json={"name": "max_steps", "value": 30}
        )
        assert raised.status_code == 200 and raised.json()["limits"]["max_steps"] == 30, raised.text
        # An operator sees and steers it; the decision is hers.
        assert (await olga.get(f"/v1/sessions/{session_id}")).status_code == 200
        denied = await olga.post(
            f"/v1/sessions/{session_id}/deny", json={"tool_use_id": "e1", "reason": "not today"}
        )
        assert denied.status_code == 200, denied.text
        await wait_status(alice, session_id, "completed")
        [call] = (await olga.get(f"/v1/sessions/{session_id}/history")).json()["tool_calls"]
        assert call["status"] == "denied" and call["reason"] == "not today"


async def test_pause_resume_cancel_and_an_ended_session(api: ApiProcess, fake_model: FakeModelServer):
    async with api.client("alice") as alice:
        started = await start(alice, fake_model, [tool_use("send_email", EMAIL, id="e1"), answer("ok")])
        session_id = started["session_id"]
        await wait_status(alice, session_id, "waiting_approval")
        paused = await alice.post(f"/v1/sessions/{session_id}/pause")
        assert paused.status_code == 200 and paused.json()["status"] == "paused", paused.text
        assert_error(await alice.post(f"/v1/sessions/{session_id}/pause"), 409, "Rejected")
        resumed = await alice.post(f"/v1/sessions/{session_id}/resume", json={})
        assert resumed.status_code == 200 and resumed.json()["status"] == "waiting_approval"
        cancelled = await alice.post(f"/v1/sessions/{session_id}/cancel", json={"reason": "changed my mind"})
        assert cancelled.status_code == 200, cancelled.text
        await wait_status(alice, session_id, "cancelled")
        for path, body in [("/approve", {"tool_use_id": "e1"}), ("/pause", None), ("/cancel", {})]:
            assert_error(await alice.post(f"/v1/sessions/{session_id}{path}", json=body), 409)


async def test_an_event_reaches_the_wait_for_it(api: ApiProcess, client: Client, fake_model: FakeModelServer):
    session_id = new_id()
    wait = tool_use("wait_for_event", {"name": "build", "timeout_seconds": 600}, id="w1")
    fake_model.script.set(session_id, [wait, answer("Built.")])
    started = SessionInput(
        goal="wait for the build", user_id="alice", tools=["wait_for_event"], search_attributes=True
    )
    await control.start(client, started, session_id, task_queue=api.env["TEMPORAL_TASK_QUEUE"])
    path = f"/v1/sessions/{session_id}/events"
    async with api.client("alice") as alice:
        waiting = await wait_status(alice, session_id, "waiting_event")
        assert waiting["waiting_for"]["name"] == "build" and waiting["waiting_for"]["until"]
        assert_error(await alice.post(path, json={"name": ""}), 422)
        assert_error(await alice.post(path, json={"name": "build", "date": 1}), 422)
        assert_error(await alice.post(path, json={"name": "build", "data": "x" * 5000}), 422)
        sent = await alice.post(path, json={"name": "build", "data": {"ok": True}})
        assert sent.status_code == 200, sent.text
        assert sent.json()["session_id"] == session_id
        done = await wait_status(alice, session_id, "completed")
        assert done["answer"] == "Built."
        [call] = (await alice.get(f"/v1/sessions/{session_id}/history")).json()["tool_calls"]
        assert call["output"] == '{"ok":true}'
        assert_error(await alice.post(path, json={"name": "build"}), 409)


async def test_a_chat_session_takes_messages_and_closes(api: ApiProcess, fake_model: FakeModelServer):
    async with api.client("alice") as alice:
        started = await start(alice, fake_model, [answer("first"), answer("second")], chat=True)
        session_id = started["session_id"]
        await wait_status(alice, session_id, "waiting_input")
        sent = await alice.post(f"/v1/sessions/{session_id}/messages", json={"text": "and now?"})
        assert sent.status_code == 200, sent.text
        second = await wait_for(lambda: _answered(alice, session_id, "second"), what="the second answer")
        assert second["user_turns"] == 2
        assert_error(await alice.post(f"/v1/sessions/{session_id}/messages", json={"text": "   "}), 422)
        closed = await alice.post(f"/v1/sessions/{session_id}/close")
        assert closed.status_code == 200, closed.text
        await wait_status(alice, session_id, "completed")
        assert_error(await alice.post(f"/v1/sessions/{session_id}/messages", json={"text": "late"}), 409)


async def _answered(http: httpx.AsyncClient, session_id: str, text: str) -> dict[str, Any] | None:
    found = (await http.get(f"/v1/sessions/{session_id}")).json()
    return found if found["status"] == "waiting_input" and (found["answer"] or "").endswith(text) else None


# ---- bad input ------------------------------------------------------------------------------


async def test_bad_bodies_get_the_error_object_and_change_nothing(
    api: ApiProcess, fake_model: FakeModelServer
):
    async with api.client("alice") as alice:
        session_id = new_id()
        json_headers = {"Content-Type": "application/json"}
        assert_error(
            await alice.post("/v1/sessions", content=b'{"goal": ', headers=json_headers), 400, "MalformedJSON"
        )
        assert_error(
            await alice.post("/v1/sessions", json={"goal": "x", "session_id": session_id, "user": "bob"}), 422
        )
        assert_error(
            await alice.post(
                "/v1/sessions", json={"goal": "x", "session_id": session_id, "max_steps": "many"}
            ),
            422,
        )
        assert_error(
            await alice.post(
                "/v1/sessions", json={"goal": "x", "session_id": session_id, "max_steps": 10**6}
            ),
            422,
        )
        assert_error(await alice.post("/v1/sessions", json={"goal": "   ", "session_id": session_id}), 422)
        assert_error(await alice.post("/v1/sessions", json={"session_id": session_id}), 422)
        assert_error(await alice.post("/v1/sessions", json={"goal": "x", "session_id": "bad id/.."}), 422)
        big = json.dumps({"text": "x" * (1024 * 1024 + 10)}).encode()
        assert_error(
            await alice.post(f"/v1/sessions/{session_id}/messages", content=big, headers=json_headers),
            413,
            "BodyTooLarge",
        )
        # A start may carry attachments: up to 48 MB, then 413 too.
        big = json.dumps({"goal": "x" * (1024 * 1024 + 10), "session_id": session_id}).encode()
        assert_error(await alice.post("/v1/sessions", content=big, headers=json_headers), 422)

        async def chunks():  # no Content-Length: the size is counted as it arrives
            yield b'{"goal": "'
            for _ in range(49 * 16):
                yield b"x" * 65536
            yield b'"}'

        assert_error(
            await alice.post("/v1/sessions", content=chunks(), headers=json_headers), 413, "BodyTooLarge"
        )
        assert_error(await alice.get(f"/v1/sessions/{session_id}"), 404, "SessionNotFound")

        started = await start(alice, fake_model, [tool_use("send_email", EMAIL, id="e1"), answer("ok")])
        sid = started["session_id"]
        await wait_status(alice, sid, "waiting_approval")
        for body in [{"tool_use_id": "e1", "input": "not an object"}, {"tool_use_id": "e1", "extra": 1}, {}]:
            assert_error(await alice.post(f"/v1/sessions/{sid}/approve", json=body), 422, "InvalidBody")
        assert_error(await alice.post(f"/v1/sessions/{sid}/approve", content=b"{", headers=json_headers), 400)
        assert_error(await alice.post(f"/v1/sessions/{sid}/cancel", json={"reason": 5}), 422)
        assert_error(await alice.get("/v1/sessions", params={"limit": 0}), 422)
        for path in ["", "/history", "/events"]:
            assert_error(await alice.get(f"/v1/sessions/no-such-{sid}{path}"), 404, "SessionNotFound")
        assert_error(await alice.post(f"/v1/sessions/no-such-{sid}/pause"), 404)
        still = (await alice.get(f"/v1/sessions/{sid}")).json()
        assert still["status"] == "waiting_approval" and still["pending_approvals"][0]["input"] == EMAIL


# ---- events ---------------------------------------------------------------------------------


def streamed_turns(count: int) -> list[dict[str, Any]]:
    """Turns that call get_time with streamed text, then an answer; slow enough to cut."""
    # The worker serves each call's text live: 12 chunks, 0.08 s apart.
    clock = {"timezone_name": "UTC"}
    turns = [
        tool_use("get_time", clock, id=f"t{i}", text=f"Step {i}: checking the clock. " * 10)
        for i in range(count)
    ]
    return [{**t, "chunk_delay": 0.08} for t in turns] + [{**answer("All done. " * 30), "chunk_delay": 0.08}]


def live_text(connections: list[list[Sse]], step: int) -> str:
    """A step's text as a page shows it from its deltas: a call's first delta on each
    connection is the text so far, the next ones add to it; a retried attempt starts again."""
    text, shown = "", None
    for events in connections:
        fresh = True
        for e in events:
            if e.event == "delta" and e.data["step"] == step:
                if fresh or e.data["attempt"] != shown:
                    text, shown, fresh = "", e.data["attempt"], False
                text += e.data["text"]
    return text


async def test_events_resume_after_a_cut_without_loss_or_repeat(api: ApiProcess, fake_model: FakeModelServer):
    async with api.client("alice") as alice:
        started = await start(alice, fake_model, streamed_turns(4))
        session_id = started["session_id"]
        first = await collect_events(alice, session_id, limit=12)  # the connection is cut here
        # Events have ids in order; the model's text deltas, read live, have none.
        assert all(e.id is None for e in first if e.event == "delta")
        assert [e.id for e in first if e.event != "delta"] == sorted(
            {e.id for e in first if e.id is not None}
        )
        last_seen = [e.id for e in first if e.id is not None][-1]
        rest = await collect_events(alice, session_id, headers={"Last-Event-ID": str(last_seen)})
        seen = [e for e in first + rest if e.event != "delta"]
        assert rest[-1].event == "end" and rest[-1].data["status"] == "completed"
        whole = await collect_events(alice, session_id)  # the whole stream, read after the end
        assert [(e.id, e.event, e.data) for e in seen] == [(e.id, e.event, e.data) for e in whole]
        first_id, last_id = whole[0].id, whole[-1].id
        assert first_id is not None and last_id is not None
        assert [e.id for e in whole] == list(range(first_id, last_id + 1))
        assert {"turn", "tool_call", "tool_result", "end"} <= {e.event for e in whole}
        assert "delta" not in {e.event for e in whole}  # the text is in the turns
        assert "delta" in {e.event for e in first + rest}
        # What was read live, across the cut, is the turn's text so far: never a piece twice.
        turns = {e.data["step"]: e.data["text"] for e in whole if e.event == "turn"}
        for step in {e.data["step"] for e in first + rest if e.event == "delta"}:
            assert turns[step].startswith(live_text([first, rest], step)), step
        # ?after= does the same; after the end there is nothing more, and the server says so.
        tail = await collect_events(alice, session_id, after=whole[-3].id)
        assert [e.id for e in tail] == [e.id for e in whole[-2:]]
        assert (
            await alice.get(f"/v1/sessions/{session_id}/events", params={"after": whole[-1].id})
        ).status_code == 204


async def test_fifty_watchers_cost_the_session_one_subscription(
    api: ApiProcess, fake_model: FakeModelServer, client: Client
):
    async with api.client("alice", limits=httpx.Limits(max_connections=100)) as alice:
        started = await start(
            alice, fake_model, [tool_use("send_email", EMAIL, id="e1", text="May I?"), answer("Sent.")]
        )
        session_id = started["session_id"]
        await wait_status(alice, session_id, "waiting_approval")
        approvals_seen = 0

        async def watch() -> list[Sse]:
            nonlocal approvals_seen
            found = []
            async with alice.stream("GET", f"/v1/sessions/{session_id}/events") as response:
                assert response.status_code == 200
                async for item in read_sse(response):
                    if isinstance(item, Sse):
                        found.append(item)
                        approvals_seen += item.event == "approval"
                        if item.event == "end":
                            return found
            return found

        watchers = [asyncio.create_task(watch()) for _ in range(50)]
        await wait_for(lambda: _at_least(lambda: approvals_seen, 50), what="50 watchers at the approval")
        assert (
            await alice.post(f"/v1/sessions/{session_id}/approve", json={"tool_use_id": "e1"})
        ).status_code == 200
        results = await asyncio.wait_for(asyncio.gather(*watchers), 60)
        first = [(e.id, e.event) for e in results[0]]
        assert first[-1][1] == "end" and all([(e.id, e.event) for e in r] == first for r in results)
        polls = await poll_updates(client, session_id)
        # The feed reads the session's history (sessions/follow.py): no stream poll at all.
        assert polls == 0, f"{polls} stream polls for 50 watchers of {len(first)} events"


async def _at_least(value, count: int) -> bool:
    return value() >= count


async def poll_updates(client: Client, session_id: str) -> int:
    history = await client.get_workflow_handle(session_id).fetch_history()
    return sum(
        1 for e in history.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
        and e.workflow_execution_update_accepted_event_attributes.accepted_request.input.name == POLL_UPDATE
    )  # fmt: skip


async def test_events_keep_alive_while_nothing_happens(api: ApiProcess, fake_model: FakeModelServer):
    async with api.client("alice") as alice:
        started = await start(alice, fake_model, [tool_use("send_email", EMAIL, id="e1"), answer("ok")])
        session_id = started["session_id"]
        await wait_status(alice, session_id, "waiting_approval")
        comments = 0
        async with alice.stream("GET", f"/v1/sessions/{session_id}/events", timeout=40) as response:

            async def until_keep_alive():
                nonlocal comments
                async for item in read_sse(response):
                    if isinstance(item, str):
                        comments += 1
                        return

            await asyncio.wait_for(until_keep_alive(), 16)
        assert comments == 1
        await alice.post(f"/v1/sessions/{session_id}/cancel", json={})


# ---- the server process ----------------------------------------------------------------------


def test_a_broken_users_file_is_one_line_naming_the_file_and_field(
    tmp_path: Path, dev_server: temporal_server.DevServer, data_dir: Path
):
    import subprocess
    import sys

    from tests.support.api import ROOT

    users = tmp_path / "users.toml"
    users.write_text('[users.alice]\ntoken_sha256 = "abc"\n')
    env = api_env(dev_server.address, "unused", data_dir, users)
    done = subprocess.run([sys.executable, "api.py", "--port", "1"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 1
    [line] = done.stderr.strip().splitlines()
    assert str(users) in line and "users.alice.token_sha256" in line
    users.write_text('[users.alice]\ntoken = "long-enough-token"\nroles = ["admin"]\n')
    done = subprocess.run(
        [sys.executable, "api.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1 and "users.alice.roles.0" in done.stderr


async def test_without_a_users_file_it_prints_a_local_url_with_a_token(
    tmp_path: Path, dev_server: temporal_server.DevServer, data_dir: Path
):
    import re

    server = start_api(api_env(dev_server.address, "unused", data_dir, None), tmp_path / "api.log")
    try:
        found = re.search(r"open (http://127\.0\.0\.1:\d+/\?token=\S+)", server.log())
        assert found is not None, server.log()
        url = found.group(1)
        async with httpx.AsyncClient(follow_redirects=True) as browser:
            page = await browser.get(url)
            assert page.status_code == 200 and "<html" in page.text.lower()
            assert (await browser.get(f"{server.url}/v1/me")).json() == {
                "user": "local",
                "operator": True,
                "namespace": "default",
                "temporal_ui_url": "http://127.0.0.1:8233",
            }
    finally:
        server.stop()


async def test_a_user_sees_and_forgets_only_their_own_memories(api: ApiProcess, client: Client):
    from activities.memory import Memory, MemoryInput, scope_id
    from workflows.memory import MemoryWorkflow

    at = datetime.now(UTC)
    scope = scope_id("alice", None)
    handle = await client.start_workflow(
        MemoryWorkflow.run, MemoryInput(memories=[Memory(key="drink", text="green tea", at=at)]), id=scope,
        task_queue=api.env["TEMPORAL_TASK_QUEUE"], id_conflict_policy=WorkflowIDConflictPolicy.TERMINATE_EXISTING,
    )  # fmt: skip
    async with api.client("alice") as alice, api.client("bob") as bob, api.client("olga") as olga:
        mine = (await alice.get("/v1/memory")).json()
        assert mine["user"] == "alice" and [m["key"] for m in mine["memories"]] == ["drink"]
        for asked in ({}, {"user": "alice"}):  # bob is not an operator: he gets his own
            theirs = (await bob.get("/v1/memory", params=asked)).json()
            assert theirs["user"] == "bob" and theirs["memories"] == []
        assert_error(await bob.delete("/v1/memory/drink", params={"user": "alice"}), 404)
        seen = (await olga.get("/v1/memory", params={"user": "alice"})).json()
        assert [m["text"] for m in seen["memories"]] == ["green tea"]
        assert (await alice.delete("/v1/memory/drink")).json()["memories"] == []
        assert_error(await alice.delete("/v1/memory/drink"), 404)
        assert_error(await alice.get("/v1/memory", params={"agent": "../x"}), 422)
    await handle.terminate()


async def test_a_budget_that_asks_is_raised_over_http(api: ApiProcess, fake_model: FakeModelServer):
    notes = [tool_use("save_note", {"title": f"n{i}", "text": "x"}, id=f"s{i}") for i in range(2)]
    async with api.client("alice") as alice:
        started = await start(alice, fake_model, [*notes, answer("done")], max_steps=1, on_limit="ask")
        session_id = started["session_id"]
        waiting = await wait_status(alice, session_id, "waiting_budget")
        assert waiting["limit_reached"]["name"] == "max_steps" and waiting["limit_reached"]["used"] == 1
        too_low = await alice.post(
            f"/v1/sessions/{session_id}/limits", json={"name": "max_steps", "value": 1}
        )
        assert "above what is used" in assert_error(too_low, 409)["message"]
        raised = await alice.post(f"/v1/sessions/{session_id}/limits", json={"name": "max_steps", "value": 3})
        assert raised.status_code == 200 and raised.json()["limits"]["max_steps"] == 3, raised.text
        done = await wait_status(alice, session_id, "completed")
        assert done["steps"] == 3 and done["limit_reached"] is None


async def test_a_message_interrupts_the_model_call_over_http(api: ApiProcess, fake_model: FakeModelServer):
    words = " ".join(f"word{i}" for i in range(600))
    async with api.client("alice") as alice, api.client("bob") as bob:
        started = await start(alice, fake_model, [answer(words, pace=0.05), answer("short")])
        session_id = started["session_id"]

        async def model_call() -> dict[str, Any] | None:
            found = [r for r in fake_model.script.requests if r["session"] == session_id]
            return found[0] if found else None

        request = await wait_for(model_call, 30, "the model call")
        path = f"/v1/sessions/{session_id}/messages"
        assert_error(await alice.post(path, json={"text": "stop", "mode": "now"}), 422)
        assert_error(await bob.post(path, json={"text": "stop", "mode": "interrupt"}), 404)
        sent = await alice.post(path, json={"text": "one word", "mode": "interrupt"})
        assert sent.status_code == 200 and sent.json()["session_id"] == session_id, sent.text

        async def closed() -> float | None:
            return request.get("closed")

        await wait_for(closed, 15, "the model's connection closed")
        done = await wait_status(alice, session_id, "completed")
        assert done["answer"] == "short" and done["steps"] == 1
