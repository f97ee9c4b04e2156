"""Notifications: signed POSTs to a real local receiver, retried with one Idempotency-Key,
delivered by workflows of their own so that neither a receiver that is down nor the
session's end waits for them; the URL rules at start and on the worker."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from temporalio.client import Client, WorkflowExecutionStatus

from activities.notify import NotifyActivities
from bench.billing import count
from devservers.fakemodel import FakeModelServer
from infra.errors import BadRequest
from infra.notify import ALLOW_ENV, NotifyRefused, check_targets
from sessions import control, start_input
from tests.conftest import ROOT, Harness, answer, model_activities, tool_use
from tests.support.api import serve_api
from tests.support.reliability import record
from tests.support.tools import TOOLS
from tests.test_actions import counted
from tests.test_loop import wait_for_status
from worker import build_worker
from workflows.contract import Decision, EventInput
from workflows.records import Notifications

AREA = "Notifications"
SECRET = "test-webhook-secret"
FAST = (0.2, 1.0, 3.0)  # first retry, longest wait, give up (seconds): 5 attempts
EMAIL = {"to": "team@example.com", "subject": "Summary", "body": "All done."}


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    raw: bytes
    answered: int

    @property
    def body(self) -> dict[str, Any]:
        return json.loads(self.raw)


@dataclass
class Receiver:
    """A webhook receiver on 127.0.0.1 that answers 503 to its first `fail_first` requests."""

    fail_first: int = 0
    fail_always: bool = False
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""

    def serve(self) -> ThreadingHTTPServer:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver.lock:
                    failing = receiver.fail_always or len(receiver.received) < receiver.fail_first
                    code = 503 if failing else 200
                    receiver.received.append(Received(self.path, dict(self.headers.items()), raw, code))
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{server.server_address[1]}"
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server

    def of(self, session_id: str) -> list[Received]:
        with self.lock:
            return [r for r in self.received if r.body.get("session_id") == session_id]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    server = found.serve()
    yield found
    server.shutdown()
    server.server_close()


@pytest_asyncio.fixture
async def notifying(
    client: Client, fake_model: FakeModelServer, data_dir: Path, receiver: Receiver
) -> AsyncIterator[Harness]:
    """A worker with the webhook secret, allowing the receiver, retrying fast."""
    queue = f"test-{uuid.uuid4().hex[:8]}"
    notify = NotifyActivities(SECRET, [receiver.url + "/"], FAST)
    worker = build_worker(
        client, TOOLS, queue=queue, model=model_activities(fake_model, data_dir), notify=notify
    )
    async with worker:
        yield Harness(client, fake_model, queue)


def signed(received: Received) -> bool:
    expected = "sha256=" + hmac.new(SECRET.encode(), received.raw, hashlib.sha256).hexdigest()
    return hmac.compare_digest(received.headers.get("X-Agent-Signature", ""), expected)


async def settled_status(client: Client, session_id: str, timeout: float = 30) -> Any:
    """`status` once no notification is pending."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        snapshot = await control.status(client, session_id)
        if not snapshot.notifications.pending:
            return snapshot
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"notifications still pending: {snapshot.notifications}")
        await asyncio.sleep(0.2)


async def billed(client: Client, session_id: str, notifications: int) -> int:
    """bench/billing.py's count of the session's runs and of its notification workflows."""
    total = await counted(client, session_id)
    for n in range(1, notifications + 1):
        events = [
            e async for e in client.get_workflow_handle(f"{session_id}.notify-{n}").fetch_history_events()
        ]
        total = total + count(events)
    return total.total


async def test_notifications_are_signed_retried_with_one_key_and_counted(
    notifying: Harness, receiver: Receiver
):
    receiver.fail_first = 2
    hook = receiver.url + "/hooks/agent"
    # Continue as new after every step: the approval's notification is still being
    # retried when the run hands over, and its outcome reaches the next run.
    handle = await notifying.start(
        [tool_use("send_email", EMAIL, id="e1"), answer("sent it")],
        notify=[hook],
        limits={"continue_as_new_after_steps": 1},
    )
    await wait_for_status(handle, "waiting_approval", queried=False)
    deadline = asyncio.get_running_loop().time() + 20
    while len(receiver.of(handle.id)) < 3:
        assert asyncio.get_running_loop().time() < deadline, receiver.of(handle.id)
        await asyncio.sleep(0.1)
    snapshot = await settled_status(notifying.client, handle.id)
    assert snapshot.status == "waiting_approval" and snapshot.runs >= 2
    assert snapshot.notifications == Notifications(delivered=1, failed=0)

    await handle.execute_update("approve_call", Decision(tool_use_id="e1"), result_type=str)
    result = await asyncio.wait_for(handle.result(), 30)
    assert result.status == "completed"
    final = await settled_status(notifying.client, handle.id)
    assert final.notifications == Notifications(delivered=2, failed=0)

    got = receiver.of(handle.id)
    approval, ended = got[:3], got[3:]
    assert [r.answered for r in got] == [503, 503, 200, 200]
    assert all(r.path == "/hooks/agent" for r in got)
    assert all(signed(r) for r in got), "every POST carries the HMAC-SHA256 of its raw body"
    keys = {r.headers["Idempotency-Key"] for r in approval}
    assert keys == {f"{handle.id}.notify-1"}, "one key on every retry of one notification"
    assert len({r.raw for r in approval}) == 1, "the same body on every retry"
    assert ended[0].headers["Idempotency-Key"] not in keys
    body = approval[0].body
    assert body["type"] == "approval_requested" and body["session_id"] == handle.id
    assert body["call"] == {
        "tool_use_id": "e1",
        "name": "send_email",
        "input": EMAIL,
        "session_id": handle.id,
    }
    datetime.fromisoformat(body["at"])
    end = ended[0].body
    assert (end["type"], end["status"], end["stop_reason"], end["answer"]) == (
        "ended",
        "completed",
        None,
        "sent it",
    )
    assert ended[0].headers["Content-Type"] == "application/json"
    record(
        AREA,
        "a receiver that fails the first two deliveries",
        "retried: the third attempt delivered, with one Idempotency-Key and a valid signature on each",
        {"attempts": 3, "delivered": final.notifications.delivered},
    )
    # Last: the one check that can miss by a local-activity batch (tests/support/billing.py).
    assert final.temporal_actions == await billed(notifying.client, handle.id, 2)


async def test_a_receiver_that_is_down_delays_neither_the_work_nor_the_end(
    notifying: Harness, receiver: Receiver
):
    receiver.fail_always = True
    handle = await notifying.start(
        [tool_use("send_email", EMAIL, id="e1"), answer("done")], notify=[receiver.url + "/down"]
    )
    await wait_for_status(handle, "waiting_approval", queried=False)
    await handle.execute_update("approve_call", Decision(tool_use_id="e1"), result_type=str)
    started = asyncio.get_running_loop().time()
    result = await asyncio.wait_for(handle.result(), 30)
    assert result.status == "completed"
    # The session closed while its `ended` notification is still being retried by its own workflow.
    ended_by = f"{handle.id}.notify-2"
    assert result.notifications.pending[-1] == ended_by
    still = await notifying.client.get_workflow_handle(ended_by).describe()
    assert still.status == WorkflowExecutionStatus.RUNNING
    closed_in = asyncio.get_running_loop().time() - started

    final = await settled_status(notifying.client, handle.id)
    assert final.notifications == Notifications(delivered=0, failed=2)
    attempts = len(receiver.of(handle.id))
    assert attempts == 10, "5 attempts each in 3 s with the test schedule"
    assert final.temporal_actions >= result.temporal_actions + 5, "the ended one's attempts are counted"
    record(
        AREA,
        "a receiver that is down for good",
        "the session ran and closed at once; each notification was abandoned after its retries",
        {"closed after approval (s)": f"{closed_in:.1f}", "attempts": attempts},
    )
    # Last: the one check that can miss by a local-activity batch (tests/support/billing.py).
    assert final.temporal_actions == await billed(notifying.client, handle.id, 2)


async def test_a_session_cancelled_from_temporal_still_notifies_its_end(
    notifying: Harness, receiver: Receiver
):
    handle = await notifying.start([tool_use("send_email", EMAIL, id="e1")], notify=[receiver.url + "/c"])
    await wait_for_status(handle, "waiting_approval")
    await handle.cancel()  # the Temporal UI's Cancel: the workflow itself is cancelled
    result = await asyncio.wait_for(handle.result(), 30)
    assert result.status == "cancelled"
    final = await settled_status(notifying.client, handle.id)
    assert final.notifications == Notifications(delivered=2)
    ended = [r.body for r in receiver.of(handle.id) if r.body["type"] == "ended"]
    assert [(e["status"], e["error"]) for e in ended] == [("cancelled", "cancelled from Temporal")]


async def test_a_worker_without_the_secret_fails_the_session_before_its_first_model_call(
    client: Client, fake_model: FakeModelServer, data_dir: Path, receiver: Receiver
):
    queue = f"test-{uuid.uuid4().hex[:8]}"
    notify = NotifyActivities(None, [receiver.url + "/"])
    worker = build_worker(
        client, TOOLS, queue=queue, model=model_activities(fake_model, data_dir), notify=notify
    )
    async with worker:
        harness = Harness(client, fake_model, queue)
        result = await harness.run([answer("never asked")], notify=[receiver.url + "/x"])
        assert result.status == "failed"
        assert "AGENT_WEBHOOK_SECRET" in (result.error or "")
        assert result.steps == 0 and harness.requests(result.session_id) == []
        assert result.notifications == Notifications(), "nothing is sent unsigned"
        # The worker checks the URLs itself: one its AGENT_NOTIFY_ALLOW does not allow fails the same way.
        other = build_worker(
            client, TOOLS, queue=queue + "-b", model=model_activities(fake_model, data_dir),
            notify=NotifyActivities(SECRET, ["https://hooks.example.com/"]),
        )  # fmt: skip
        async with other:
            refused = await Harness(client, fake_model, queue + "-b").run(
                [answer("never")], notify=[receiver.url + "/x"]
            )
        assert refused.status == "failed" and ALLOW_ENV in (refused.error or "") and refused.steps == 0
    assert SECRET not in json.dumps(result.model_dump(mode="json"))


# ---- waiting_event: a session that waits for an event ---------------------------------------


async def test_a_wait_for_an_event_is_notified_once_and_an_event_already_kept_is_not(
    notifying: Harness, receiver: Receiver
):
    hook = receiver.url + "/e"
    wait = {"name": "build-done", "timeout_seconds": 1200}
    handle = await notifying.start(
        # The second wait comes a second later: the second event is kept by then.
        [tool_use("wait_for_event", wait, id="w1"), {**tool_use("wait_for_event", wait, id="w2"), "delay": 1.0},
         answer("built")],
        notify=[hook], tools=["wait_for_event"],
    )  # fmt: skip
    await wait_for_status(handle, "waiting_event")
    deadline = asyncio.get_running_loop().time() + 20
    while not receiver.of(handle.id):
        assert asyncio.get_running_loop().time() < deadline, "no waiting_event notification"
        await asyncio.sleep(0.1)
    # Two events: the first ends this wait, the second is kept and taken by the next wait at once.
    for n in (1, 2):
        await handle.execute_update("send_event", EventInput(name="build-done", data=n), result_type=str)
    result = await asyncio.wait_for(handle.result(), 30)
    assert result.status == "completed" and result.answer == "built"
    final = await settled_status(notifying.client, handle.id)
    assert final.notifications == Notifications(delivered=2, failed=0)

    waiting, ended = receiver.of(handle.id)
    assert signed(waiting) and waiting.headers["Idempotency-Key"] == f"{handle.id}.notify-1"
    assert waiting.body["type"] == "waiting_event" and waiting.body["name"] == "build-done"
    assert waiting.body["session_id"] == handle.id
    until = datetime.fromisoformat(waiting.body["until"])
    assert until - datetime.fromisoformat(waiting.body["at"]) == timedelta(minutes=20)
    assert ended.body["type"] == "ended" and ended.headers["Idempotency-Key"] == f"{handle.id}.notify-2"


# ---- the URLs a start may name -------------------------------------------------------------


def test_allowed_urls():
    allow = ["https://hooks.example.com", "http://127.0.0.1:9000/agent/"]
    assert check_targets(["https://hooks.example.com/a", "https://hooks.example.com/a"], allow) == [
        "https://hooks.example.com/a"
    ]
    check_targets(["https://hooks.example.com", "http://127.0.0.1:9000/agent/x?y=1"], allow)
    for bad in [
        "https://hooks.example.com.evil.org/a",  # a prefix ends at a boundary
        "https://hooks.example.com:444/a",
        "https://hooks.example.com@evil.org/",  # a user name
        "http://127.0.0.1:9000/agentx",
        "ftp://hooks.example.com/a",
        "https://evil.org/https://hooks.example.com/",
    ]:
        with pytest.raises(NotifyRefused):
            check_targets([bad], allow)
    with pytest.raises(NotifyRefused, match=ALLOW_ENV):
        check_targets(["https://hooks.example.com/a"], [])


def test_start_input_checks_notify_against_the_allow_list(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    definitions = tmp_path / "agents.toml"
    definitions.write_text('[agents.pager]\nnotify = ["https://hooks.example.com/pager"]\n')
    monkeypatch.setenv("AGENT_DEFINITIONS", str(definitions))
    monkeypatch.delenv(ALLOW_ENV, raising=False)
    with pytest.raises(BadRequest, match=f"{ALLOW_ENV} is empty"):
        start_input.resolve(
            goal="g", agent=None, limits={}, fields={"notify": ["https://hooks.example.com/x"]}
        )
    with pytest.raises(BadRequest, match=f"{ALLOW_ENV} is empty"):
        start_input.resolve(goal="g", agent="pager", limits={}, fields={})
    assert start_input.resolve(goal="g", agent=None, limits={}, fields={}).notify == []
    monkeypatch.setenv(ALLOW_ENV, " https://hooks.example.com/ , http://localhost:8000/")
    assert start_input.resolve(goal="g", agent="pager", limits={}, fields={}).notify == [
        "https://hooks.example.com/pager"
    ]
    mine = start_input.resolve(
        goal="g", agent="pager", limits={}, fields={"notify": ["http://localhost:8000/me"]}
    )
    assert mine.notify == ["http://localhost:8000/me"], "the caller's list replaces the agent's"
    with pytest.raises(BadRequest, match="not allowed"):
        start_input.resolve(goal="g", agent=None, limits={}, fields={"notify": ["https://evil.org/"]})


async def test_client_start_with_a_url_not_allowed_is_one_line(dev_server):
    env = {**os.environ, "TEMPORAL_ADDRESS": dev_server.address, ALLOW_ENV: "https://hooks.example.com/"}
    env.pop("TEMPORAL_PROFILE", None)
    for allow, url, needle in [
        ("https://hooks.example.com/", "https://evil.org/x", "is not allowed"),
        ("", "https://hooks.example.com/x", f"{ALLOW_ENV} is empty"),
    ]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "client.py", "start", "goal", "--notify", url, cwd=ROOT, env={**env, ALLOW_ENV: allow},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 1, (out, err)
        lines = err.decode().strip().splitlines()
        assert len(lines) == 1 and needle in lines[0], lines
        assert out == b""


async def test_the_api_refuses_a_url_it_does_not_allow(
    client: Client, dev_server, fake_model: FakeModelServer, data_dir: Path, tmp_path: Path
):
    folder_api = serve_api(client, dev_server.address, fake_model, data_dir, tmp_path)
    async with folder_api as api, api.client("alice") as alice:
        session_id = f"api-{uuid.uuid4().hex[:10]}"
        body = {"goal": "x", "session_id": session_id, "notify": ["http://169.254.169.254/latest"]}
        response = await alice.post("/v1/sessions", json=body)
        assert response.status_code == 422, response.text
        assert ALLOW_ENV in response.json()["error"]["message"], "refused: the service allows no such URL"
        assert (await alice.get(f"/v1/sessions/{session_id}")).status_code == 404
