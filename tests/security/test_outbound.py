"""Nothing a user sends makes a worker or the service reach out. An output schema whose
`$ref` could lead outside it, or leads nowhere in the schema the model gets, is refused
at every door before anything starts (HTTP, MCP, A2A, the command line); a schema that
reached a workflow anyway (a recorded or forked input) is validated without any I/O; a
notification URL is checked as it will be delivered, and delivered as it was checked. A
loopback listener records every request anyone makes to it."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from temporalio.client import Client as TemporalClient

from activities.notify import NotifyActivities
from devservers import temporal_server
from devservers.fakemodel import FakeModelServer
from tests.conftest import ROOT, Harness, answer, model_activities, tool_use
from tests.support.api import ApiProcess, serve_api
from tests.support.listener import Listener, listening
from tests.support.tools import TOOLS
from tests.test_a2a import agent, message, send
from tests.test_mcp_server import error_line
from tests.test_mcp_server_http import over_http
from worker import build_worker
from workflows.typed_output import FINAL_ANSWER

pytestmark = pytest.mark.xdist_group("security-outbound")
SECRET = "test-webhook-secret"


@pytest.fixture(scope="module")
def listener() -> Iterator[Listener]:
    # What a schema fetched from it would say: that `a` is an integer.
    with listening({"type": "integer"}) as found:
        yield found


@pytest_asyncio.fixture(scope="module")
async def api(
    client: TemporalClient, dev_server: temporal_server.DevServer, fake_model: FakeModelServer, data_dir: Path,
    tmp_path_factory: pytest.TempPathFactory, listener: Listener,
) -> AsyncIterator[ApiProcess]:  # fmt: skip
    async with serve_api(
        client, dev_server.address, fake_model, data_dir, tmp_path_factory.mktemp("outbound"),
        env={"AGENT_NOTIFY_ALLOW": f"{listener.url}/hooks"},
    ) as server:  # fmt: skip
        yield server


def reaching(listener: Listener) -> dict[str, dict[str, Any]]:
    """Schemas a start must refuse, by what is wrong with them."""
    return {
        "a remote $ref": {"type": "object", "properties": {"a": {"$ref": f"{listener.url}/ssrf.json"}}},
        "a file $ref": {"type": "object", "properties": {"a": {"$ref": "file:///etc/hostname"}}},
        "a relative $ref": {"type": "object", "properties": {"a": {"$ref": "other.json"}}},
        "a remote $dynamicRef": {"type": "array", "items": {"$dynamicRef": f"{listener.url}/d.json#m"}},
        "an $id below the root": {
            "type": "object",
            "$defs": {"n": {"$id": f"{listener.url}/n.json", "type": "string"}},
            "properties": {"a": {"$ref": "#/$defs/n"}},
        },
        "a pointer to nowhere": {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}},
        "an anchor that is not there": {"type": "object", "properties": {"a": {"$ref": "#nowhere"}}},
        # Not an object: the model gets it as the `answer` property, where `#/items` is nothing.
        "a pointer lost by the wrapping": {"type": "array", "items": {"type": "string"}, "prefixItems": [{"$ref": "#/items"}]},
    }  # fmt: skip


def says_ref(text: str) -> bool:
    return "$ref" in text and "\n" not in text.strip()


async def test_a_schema_that_reaches_outside_or_nowhere_is_refused_at_every_door(
    api: ApiProcess, listener: Listener, data_dir: Path, tmp_path: Path
):
    schemas = reaching(listener)
    async with api.client("alice") as alice:
        for why, schema in schemas.items():
            session_id = f"out-{uuid.uuid4().hex[:10]}"
            refused = await alice.post(
                "/v1/sessions", json={"goal": "g", "session_id": session_id, "output_schema": schema}
            )
            assert refused.status_code == 422, f"{why}: {refused.status_code} {refused.text}"
            assert says_ref(refused.json()["error"]["message"]), (why, refused.text)
            assert (await alice.get(f"/v1/sessions/{session_id}")).status_code == 404, why
    async with over_http(api, "alice") as mcp:
        for why, schema in schemas.items():
            called = await mcp.call_tool("start_session", {"goal": "g", "output_schema": schema})
            assert says_ref(error_line(called)), (why, called.content)
    async with agent(api, "alice") as a2a:
        for why, schema in schemas.items():
            sent = message(text="g", context_id=f"out-{uuid.uuid4().hex[:10]}")
            sent.metadata.update({"output_schema": schema})
            with pytest.raises(Exception) as refused:  # the SDK's error for the JSON-RPC error
                await send(a2a, sent)
            assert says_ref(str(refused.value)), (why, refused.value)
    for why in ("a remote $ref", "a pointer to nowhere"):
        path = tmp_path / "schema.json"
        path.write_text(json.dumps(schemas[why]))
        code, out, err = await command_line(data_dir, "start", "g", "--output-schema", str(path))
        assert code == 1 and not out and says_ref(err), (why, code, out, err)
    assert listener.paths() == []


async def command_line(data_dir: Path, *args: str) -> tuple[int, str, str]:
    """`python client.py ARGS`; a start it refuses never reaches a server."""
    env = {**os.environ, "AGENT_DATA_DIR": str(data_dir), "TEMPORAL_ADDRESS": "127.0.0.1:1"}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "client.py", *args, cwd=ROOT, env=env,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 60)
    return await process.wait(), out.decode(), err.decode()


async def test_a_recorded_schema_with_a_remote_ref_fetches_nothing(harness: Harness, listener: Listener):
    """A schema no start would take, in an input that skipped the start's check (a recorded
    history, a fork): the workflow validates the answer with an empty registry, and says
    why the schema cannot be used."""
    before = listener.paths()
    schema = {"type": "object", "properties": {"a": {"$ref": f"{listener.url}/ssrf.json"}}}
    status = await harness.run([tool_use(FINAL_ANSWER, {"a": 1}), answer("{}")], output_schema=schema)
    assert listener.paths() == before, listener.paths()
    assert status.status == "failed" and status.error is not None and "$ref" in status.error, status


@pytest_asyncio.fixture
async def notifying(
    client: TemporalClient, fake_model: FakeModelServer, data_dir: Path, listener: Listener
) -> AsyncIterator[Harness]:
    """A worker that signs notifications and allows the listener's /hooks."""
    queue = f"sec-{uuid.uuid4().hex[:8]}"
    notify = NotifyActivities(SECRET, [f"{listener.url}/hooks"], (0.2, 1.0, 3.0))
    worker = build_worker(
        client, TOOLS, queue=queue, model=model_activities(fake_model, data_dir), notify=notify
    )
    async with worker:
        yield Harness(client, fake_model, queue)


def escapes(url: str) -> list[str]:
    """Notification URLs that start with the allowed `URL/hooks` yet lead elsewhere."""
    return [
        f"{url}/hooks/../admin",
        f"{url}/hooks/%2e%2e/admin",
        f"{url}/hooks/%2E%2E%2Fadmin",
        f"{url}/hooks\\..\\admin",
        f"{url}/hooks/./../admin",
    ]


async def test_a_notification_url_is_checked_as_it_is_delivered(
    api: ApiProcess, notifying: Harness, listener: Listener
):
    async with api.client("alice") as alice:
        for url in escapes(listener.url):
            refused = await alice.post("/v1/sessions", json={"goal": "g", "notify": [url]})
            assert refused.status_code == 422, f"{url}: {refused.status_code} {refused.text}"
        # What the check allowed is what the session records, spelled as it will be sent.
        port = listener.url.rsplit(":", 1)[1]
        kept = await alice.post(
            "/v1/sessions", json={"goal": "g", "notify": [f"HTTP://127.0.0.1:{port}/hooks/./a/../b"]}
        )
        assert kept.status_code == 201, kept.text
        started = await notifying.client.get_workflow_handle(kept.json()["session_id"]).fetch_history()
        [recorded] = started.events[0].workflow_execution_started_event_attributes.input.payloads
        assert json.loads(recorded.data)["notify"] == [f"{listener.url}/hooks/b"]
    # A recorded input that skipped the start's check: the worker refuses it, and sends nothing.
    status = await notifying.run([answer("done")], notify=escapes(listener.url)[:1])
    assert status.status == "failed" and "not allowed" in (status.error or ""), status
    assert not [p for p in listener.paths() if not p.startswith("/hooks/")], listener.paths()
