"""Bad input is one line. A flag out of range or malformed, a users or definitions file
that is not UTF-8: each entry point stops with one line naming the problem (exit 1, or
argparse's 2 for a flag), never a traceback. A read of an id that is not a session (a
notification's workflow) is a 404 at every door, not a query error naming Temporal's
internals. The public A2A card is made once, at start, and answers whatever happens to
the definitions file later."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from a2a.types.a2a_pb2 import GetTaskRequest
from temporalio.client import Client as TemporalClient

from devservers import temporal_server
from devservers.fakemodel import FakeModelServer
from tests.conftest import ROOT
from tests.support.api import ApiProcess, serve_api
from tests.test_a2a import agent
from tests.test_mcp_server import error_line
from tests.test_mcp_server_http import over_http
from workflows.notify import WORKFLOW_NAME, NotifyInput

pytestmark = pytest.mark.xdist_group("security-bad-input")
NOT_UTF8 = b'[agents.x]\ndescription = "caf\xe9"\n'
AGENTS = '[agents.helper]\ndescription = "Helps"\n'


async def run(args: list[str], env: dict[str, str] | None = None) -> tuple[int, str]:
    """An entry point's exit code and standard error, with Temporal nowhere to be reached."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, *args, cwd=ROOT, env={**os.environ, "TEMPORAL_ADDRESS": "127.0.0.1:1", **(env or {})},
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(process.communicate(), 60)
    return await process.wait(), err.decode()


async def test_each_entry_point_stops_with_one_line(tmp_path: Path):
    bad = tmp_path / "not-utf8.toml"
    bad.write_bytes(NOT_UTF8)
    defs = {"AGENT_DEFINITIONS": str(bad)}
    cases: list[tuple[list[str], dict[str, str], str]] = [
        (["api.py", "--port", "70000"], {}, "70000"),
        (["api.py", "--cookie-hours", "0"], {}, "cookie-hours"),
        (["api.py"], {"AGENT_API_USERS": str(bad)}, str(bad)),
        (["api.py"], defs, str(bad)),
        (["worker.py", "--metrics-port", "70000"], {}, "70000"),
        (["worker.py", "--drain-seconds", "-1"], {}, "-1"),
        (["worker.py", "--no-live"], defs, str(bad)),
        (["devserver.py", "--port", "70000"], {}, "70000"),
        (["demo.py", "--ui-port", "99999"], {}, "99999"),
        (["-m", "infra.codec_server", "--port", "70000"], {}, "70000"),
        (["worker.py"], {"AGENT_LIVE_SECRET": "short"}, "AGENT_LIVE_SECRET"),
        (["api.py"], {"AGENT_COOKIE_SECRET": "short"}, "AGENT_COOKIE_SECRET"),
        (["client.py", "agents"], defs, str(bad)),
        (["client.py", "start", "g"], defs, str(bad)),
    ]
    found = await asyncio.gather(*(run(args, env) for args, env, _ in cases))
    for (args, _, named), (code, err) in zip(cases, found, strict=True):
        lines = err.strip().splitlines()
        assert code in (1, 2) and len(lines) == 1 and named in err, (args, code, err[-1500:])
        assert "Traceback" not in err


@pytest_asyncio.fixture(scope="module")
async def api(
    client: TemporalClient, dev_server: temporal_server.DevServer, fake_model: FakeModelServer, data_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[ApiProcess]:  # fmt: skip
    folder = tmp_path_factory.mktemp("bad-input")
    (folder / "agents.toml").write_text(AGENTS)
    async with serve_api(
        client, dev_server.address, fake_model, data_dir, folder,
        env={"AGENT_DEFINITIONS": str(folder / "agents.toml")},
    ) as server:  # fmt: skip
        yield server


async def test_an_id_that_is_not_a_session_is_not_found_at_every_door(
    api: ApiProcess, client: TemporalClient
):
    notification = f"nobody-{uuid.uuid4().hex[:8]}.notify-1"
    handle = await client.start_workflow(
        WORKFLOW_NAME, NotifyInput(session_id="nobody", key=notification, urls=[], body={}, tell_session=False),
        id=notification, task_queue=api.env["TEMPORAL_TASK_QUEUE"],
    )  # fmt: skip
    await handle.result()
    async with api.client("olga") as olga:  # an operator, who may read every session
        for path in ("", "/history"):
            got = await olga.get(f"/v1/sessions/{notification}{path}")
            assert got.status_code == 404, (path, got.status_code, got.text)
    async with over_http(api, "olga") as mcp:
        line = error_line(await mcp.call_tool("get_session", {"session_id": notification}))
        assert "no session" in line, line
    async with agent(api, "olga") as a2a:
        with pytest.raises(Exception, match="no task") as missing:
            await a2a.get_task(GetTaskRequest(id=f"{notification}.turn-1"))
        assert "Query" not in str(missing.value), missing.value


async def test_the_agent_card_is_made_once(api: ApiProcess):
    async with httpx.AsyncClient(base_url=api.url) as http:
        first = await http.get("/.well-known/agent-card.json")
        assert first.status_code == 200 and [s["id"] for s in first.json()["skills"]] == ["helper"]
        Path(api.env["AGENT_DEFINITIONS"]).write_bytes(NOT_UTF8)  # a bad edit while it runs
        again = await http.get("/.well-known/agent-card.json")
        assert again.status_code == 200 and again.json() == first.json(), again.text
