"""What an operator sets, at the service's doors (HTTP, MCP, A2A): a user may lower an
agent's cost-bearing limits but not raise them (422 naming the field and its ceiling),
starts only the agents the users file gives them (403), and past `max_running` or
`starts_per_minute` is told to come back (429, `Retry-After`). A refused start starts
nothing and stores nothing; the page offers the agents a user may start."""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
import pytest_asyncio
from temporalio.client import Client as TemporalClient

from devservers import temporal_server
from devservers.fakemodel import FakeModelServer
from infra.definitions import DefinitionError, load_definitions
from service.auth import UsersFileError, load_users
from sessions import control
from tests.conftest import answer, tool_use
from tests.support.api import TOKENS, ApiProcess, serve_api, wait_for
from tests.test_a2a import agent, message, send
from tests.test_mcp_server import error_line
from tests.test_mcp_server_http import over_http

pytestmark = pytest.mark.xdist_group("security-quotas")
AGENTS = """
[ceilings]
max_steps = 50
timeout = 1800

[agents.helper]
description = "Helps"
tools = ["get_time"]
max_steps = 5

[agents.other]
description = "Does other things"
tools = []

[agents.waiter]
description = "Waits"
tools = ["wait_for_cancel"]

[agents.boss]
description = "Hands its work to a waiter"
tools = []
subagents = ["waiter"]
"""
# name -> the users file's quota lines
USERS = {
    "lena": "",
    "olga": 'roles = ["operator"]',
    "ann": 'agents = ["helper"]',
    "max": "max_running = 1",
    "sam": "max_running = 2",
    "rita": "starts_per_minute = 2",
    "zed": "starts_per_minute = 0",
    "cora": "max_cost_budget = 1.5",
}


def users_text() -> str:
    return "".join(
        f'[users.{name}]\ntoken = "{name}-token-0123456789"\n{extra}\n\n' for name, extra in USERS.items()
    )


@pytest_asyncio.fixture(scope="module")
async def api(
    client: TemporalClient, dev_server: temporal_server.DevServer, fake_model: FakeModelServer, data_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[ApiProcess]:  # fmt: skip
    folder = tmp_path_factory.mktemp("quotas")
    (folder / "agents.toml").write_text(AGENTS)
    TOKENS.update({name: f"{name}-token-0123456789" for name in USERS})
    async with serve_api(
        client, dev_server.address, fake_model, data_dir, folder,
        env={"AGENT_DEFINITIONS": str(folder / "agents.toml")}, users_text=users_text(),
    ) as server:  # fmt: skip
        yield server


def new_id() -> str:
    return f"quota-{uuid.uuid4().hex[:10]}"


async def start(http: httpx.AsyncClient, fake_model: FakeModelServer, **body: Any) -> httpx.Response:
    session_id = body.pop("session_id", None) or new_id()
    fake_model.script.set(session_id, [answer("done")])
    return await http.post("/v1/sessions", json={"goal": "g", "session_id": session_id, **body})


def refusal(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    line = response.json()["error"]["message"]
    assert "\n" not in line, line
    return line


async def test_a_user_lowers_limits_and_only_an_operator_raises_them(
    api: ApiProcess, fake_model: FakeModelServer
):
    async with api.client("lena") as lena, api.client("olga") as olga:
        lowered = await start(lena, fake_model, agent="helper", max_steps=3)
        assert lowered.status_code == 201 and lowered.json()["limits"]["max_steps"] == 3, lowered.text
        line = refusal(await start(lena, fake_model, agent="helper", max_steps=6), 422)
        assert "max_steps" in line and "ceiling of 5" in line, line
        # Without an agent, the deployment's ceiling: its own, or the default of each.
        line = refusal(await start(lena, fake_model, max_steps=51), 422)
        assert "max_steps" in line and "ceiling of 50" in line, line
        line = refusal(await start(lena, fake_model, timeout=3600), 422)
        assert "timeout" in line and "ceiling of 1800" in line, line
        # A default above its ceiling is brought down to it; an operator's is not.
        assert (await start(lena, fake_model)).json()["limits"]["timeout_seconds"] == 1800
        raised = await start(olga, fake_model, agent="helper", max_steps=40)
        assert raised.status_code == 201 and raised.json()["limits"]["max_steps"] == 40, raised.text
        assert raised.json()["limits"]["timeout_seconds"] == 3600
    async with over_http(api, "lena") as mcp:
        called = await mcp.call_tool("start_session", {"goal": "g", "agent": "helper", "token_budget": 10**9})
        line = error_line(called)
        assert "token_budget" in line and "ceiling of 2000000" in line, line
    async with agent(api, "lena") as a2a:
        sent = message(text="g")
        sent.metadata.update({"agent": "helper", "max_steps": 9})
        with pytest.raises(Exception, match="max_steps 9 is above its ceiling of 5"):
            await send(a2a, sent)


async def test_a_user_raises_a_waiting_limit_only_to_its_ceiling(
    api: ApiProcess, fake_model: FakeModelServer
):
    session_id = new_id()
    fake_model.script.set(session_id, [tool_use("wait_for_cancel", {"seconds": 0}, id="w1"), answer("done")])
    async with api.client("lena") as lena:
        body = {"goal": "g", "session_id": session_id, "agent": "waiter", "max_steps": 1, "on_limit": "ask"}
        assert (await lena.post("/v1/sessions", json=body)).status_code == 201

        async def waiting() -> bool:
            return (await lena.get(f"/v1/sessions/{session_id}")).json()["status"] == "waiting_budget"

        await wait_for(waiting, what="the session at its limit")
        path = f"/v1/sessions/{session_id}/limits"
        line = refusal(await lena.post(path, json={"name": "max_steps", "value": 51}), 422)
        assert "max_steps 51 is above its ceiling of 50" in line, line
        raised = await lena.post(path, json={"name": "max_steps", "value": 2})
        assert raised.status_code == 200 and raised.json()["limits"]["max_steps"] == 2, raised.text


async def test_a_start_without_an_agent_has_no_tools(
    api: ApiProcess, fake_model: FakeModelServer, client: TemporalClient
):
    async with api.client("olga") as olga:
        started = await start(olga, fake_model)
        assert started.status_code == 201, started.text
    found, _ = await control.start_input(client, control.handle(client, started.json()["session_id"]))
    assert found.agent is None and found.tools == []


async def test_a_user_starts_only_their_agents(api: ApiProcess, fake_model: FakeModelServer):
    async with api.client("ann") as ann:
        assert (await start(ann, fake_model, agent="helper")).status_code == 201
        line = refusal(await start(ann, fake_model, agent="other"), 403)
        assert line == "user ann may not start agent 'other'; agents they may start: helper", line
        line = refusal(await start(ann, fake_model), 403)
        assert "without an agent" in line, line
        listed = await ann.get("/v1/agents")
        assert listed.json() == {"agents": [{"name": "helper", "description": "Helps", "default": False}]}
    async with api.client("lena") as lena:
        names = [a["name"] for a in (await lena.get("/v1/agents")).json()["agents"]]
        assert names == ["helper", "other", "waiter", "boss"]
    async with over_http(api, "ann") as mcp:
        called = await mcp.call_tool("list_agents", {})
        assert [a["name"] for a in called.structured_content["agents"]] == ["helper"]  # pyright: ignore[reportOptionalSubscript]


async def test_a_cost_budget_is_at_most_the_users(api: ApiProcess, fake_model: FakeModelServer):
    async with api.client("cora") as cora:
        line = refusal(await start(cora, fake_model, cost_budget=2), 422)
        assert "cost_budget" in line and "ceiling of 1.5" in line, line
        given = await start(cora, fake_model)  # none set: the most they may
        assert given.status_code == 201 and given.json()["limits"]["cost_budget_usd"] == 1.5, given.text


async def test_running_sessions_past_max_running_wait(
    api: ApiProcess, fake_model: FakeModelServer, client: TemporalClient
):
    async with api.client("max") as user:
        first = await start(user, fake_model, chat=True)  # waits for its next message
        assert first.status_code == 201, first.text
        query = "AgentUser = 'max' AND ExecutionStatus = 'Running'"

        async def visible() -> bool:
            return (await client.count_workflows(query)).count == 1

        await wait_for(visible, what="the chat in visibility")
        over = await start(user, fake_model, chat=True)
        line = refusal(over, 429)
        assert "max_running 1" in line and int(over.headers["Retry-After"]) > 0, line
        await user.post(f"/v1/sessions/{first.json()['session_id']}/close", json={})


async def test_sub_agents_do_not_count_toward_max_running(
    api: ApiProcess, fake_model: FakeModelServer, client: TemporalClient
):
    boss = new_id()
    fake_model.script.set(boss, [tool_use("agent__waiter", {"task": "wait"}, id="t1"), answer("done")])
    fake_model.script.set(
        f"{boss}.sub-1", [tool_use("wait_for_cancel", {"seconds": 60}, id="w1"), answer("ok")]
    )
    async with api.client("sam") as sam:
        started = await sam.post("/v1/sessions", json={"goal": "g", "session_id": boss, "agent": "boss"})
        assert started.status_code == 201, started.text
        query = "AgentUser = 'sam' AND ExecutionStatus = 'Running'"

        async def both_visible() -> bool:
            return (await client.count_workflows(query)).count == 2

        await wait_for(both_visible, what="the session and its sub-agent in visibility")
        second = await start(sam, fake_model, chat=True)  # the sub-agent is its parent's work
        assert second.status_code == 201, second.text

        async def three_visible() -> bool:
            return (await client.count_workflows(query)).count == 3

        await wait_for(three_visible, what="the second session in visibility")
        refusal(await start(sam, fake_model, chat=True), 429)
        await sam.post(f"/v1/sessions/{boss}/cancel", json={})
        await sam.post(f"/v1/sessions/{second.json()['session_id']}/cancel", json={})


async def test_starts_past_starts_per_minute_wait_and_store_nothing(
    api: ApiProcess, fake_model: FakeModelServer, data_dir: Path
):
    data = f"a file of its own {uuid.uuid4()}".encode()
    ref = hashlib.sha256(data).hexdigest()
    blob = data_dir / "transcripts" / "attachments" / ref[:2] / ref
    files = [{"name": "a.txt", "media_type": "text/plain", "data": base64.b64encode(data).decode()}]
    async with api.client("rita") as rita, api.client("ann") as ann:
        refusal(await start(ann, fake_model, agent="other", attachments=files), 403)
        for _ in range(2):
            assert (await start(rita, fake_model)).status_code == 201
        session_id = new_id()
        over = await start(rita, fake_model, session_id=session_id, attachments=files)
        line = refusal(over, 429)
        assert "starts_per_minute 2" in line and 0 < int(over.headers["Retry-After"]) <= 60, line
        assert (await rita.get(f"/v1/sessions/{session_id}")).status_code == 404
        assert not blob.exists()


async def test_a_start_with_a_taken_id_stores_nothing(
    api: ApiProcess, fake_model: FakeModelServer, data_dir: Path
):
    data = f"a file of its own {uuid.uuid4()}".encode()
    blob = data_dir / "transcripts" / "attachments" / hashlib.sha256(data).hexdigest()[:2]
    blob = blob / hashlib.sha256(data).hexdigest()
    files = [{"name": "a.txt", "media_type": "text/plain", "data": base64.b64encode(data).decode()}]
    async with api.client("lena") as lena:
        taken = (await start(lena, fake_model)).json()["session_id"]
        refusal(await start(lena, fake_model, session_id=taken, attachments=files), 409)
    assert not blob.exists()


async def test_over_a_quota_is_the_same_line_at_every_door(api: ApiProcess):
    async with api.client("zed") as zed:
        line = refusal(await zed.post("/v1/sessions", json={"goal": "g"}), 429)
        assert "starts_per_minute 0" in line, line
    async with over_http(api, "zed") as mcp:
        assert error_line(await mcp.call_tool("start_session", {"goal": "g"})).endswith(f": {line}")
    async with agent(api, "zed") as a2a:
        with pytest.raises(Exception, match="starts_per_minute 0") as refused:
            await send(a2a, message(text="g"))
        assert line in str(refused.value), refused.value


def test_default_agent_names_what_a_start_without_one_runs(tmp_path: Path):
    path = tmp_path / "agents.toml"
    path.write_text(f'default_agent = "helper"\n{AGENTS}')
    assert load_definitions(path).default == "helper"
    path.write_text(f'default_agent = "nobody"\n{AGENTS}')
    with pytest.raises(DefinitionError, match="default_agent: no agent 'nobody'"):
        load_definitions(path)


def test_the_users_file_quotas_are_checked(tmp_path: Path):
    path = tmp_path / "users.toml"
    path.write_text('[users.a]\ntoken = "a-token-0123456789"\nmax_running = -1\n')
    with pytest.raises(UsersFileError, match=r"users\.a\.max_running"):
        load_users(path)
    path.write_text('[users.a]\ntoken = "a-token-0123456789"\nagents = ["helper"]\nstarts_per_minute = 5\n')
    [user] = load_users(path).users
    assert user.quota.agents == ("helper",) and user.quota.starts_per_minute == 5


async def test_a_chats_queue_holds_20_messages_and_1_mb(api: ApiProcess, fake_model: FakeModelServer):
    session_id = new_id()
    fake_model.script.set(session_id, [tool_use("wait_for_cancel", {"seconds": 60}, id="w1"), answer("done")])
    big = "\N{GRINNING FACE}" * 200_000  # 800,000 bytes of UTF-8, 200,000 characters

    async def send(text: str) -> httpx.Response:
        body = json.dumps({"text": text, "mode": "queue"}, ensure_ascii=False).encode()
        headers = {"Content-Type": "application/json"}
        return await lena.post(f"/v1/sessions/{session_id}/messages", content=body, headers=headers)

    async with api.client("lena") as lena:
        body = {"goal": "g", "session_id": session_id, "agent": "waiter", "chat": True}
        assert (await lena.post("/v1/sessions", json=body)).status_code == 201
        assert (await send(big)).status_code == 200
        line = refusal(await send(big), 409)
        assert "800000 bytes" in line and "1 MB" in line, line
        for n in range(19):
            assert (await send(f"message {n}")).status_code == 200
        line = refusal(await send("one more"), 409)
        assert "20 messages" in line, line
        assert (await lena.post(f"/v1/sessions/{session_id}/cancel", json={})).status_code == 200
