"""Host and Origin at every HTTP door of `python api.py` (the API, the page and its files,
the events, `/mcp`, `/a2a`, the agent card, the docs): a name the service does not answer
to is 421, a page it does not serve is 403, before any token is looked at; a request
without `Origin` is judged by its token alone. The defaults (loopback on the port it
listens on) and what `--allow-host`, `--public-url` and `AGENT_ALLOWED_ORIGINS` add.
The attack this stops, DNS rebinding, is a page whose name points at 127.0.0.1: its
requests carry its own name as Host and Origin."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2 as httpx
import pytest
import pytest_asyncio
from temporalio.client import Client

from devservers import temporal_server
from devservers.fakemodel import FakeModelServer
from tests.support.api import ROOT, TOKENS, ApiProcess, serve_api

pytestmark = pytest.mark.xdist_group("origins")

EVIL = "evil.example.com"
PUBLIC = "https://agents.example.com/base"
INITIALIZE = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}  # fmt: skip
# Each door, and what it answers a right caller (no Origin) today.
DOORS = [
    ("GET", "/v1/sessions", None, 200),
    ("GET", "/v1/me", None, 200),
    ("GET", "/", None, 200),
    ("GET", "/static/app.js", None, 200),
    ("GET", "/v1/sessions/no-such-session/events", None, 404),
    ("POST", "/mcp", INITIALIZE, 200),
    ("POST", "/a2a", {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x.turn-1"}}, 200),
    ("GET", "/.well-known/agent-card.json", None, 200),
    ("GET", "/openapi.json", None, 200),
    ("GET", "/docs", None, 200),
]
MCP_ACCEPT = {"Accept": "application/json, text/event-stream"}


@pytest_asyncio.fixture(scope="module")
async def api(
    client: Client, dev_server: temporal_server.DevServer, fake_model: FakeModelServer, data_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[ApiProcess]:  # fmt: skip
    async with serve_api(
        client, dev_server.address, fake_model, data_dir, tmp_path_factory.mktemp("origins"),
        args=("--allow-host", "agents.internal:9000", "--public-url", PUBLIC),
        env={"AGENT_ALLOWED_ORIGINS": "https://app.example.com, https://other.example.com:8443"},
    ) as server:  # fmt: skip
        yield server


async def call(api: ApiProcess, method: str, path: str, body: object, **headers: str) -> httpx.Response:
    async with api.client("alice", headers={**MCP_ACCEPT, **headers}) as http:
        return await http.request(method, path, json=body)


@pytest.mark.parametrize(("method", "path", "body", "status"), DOORS, ids=[d[1] for d in DOORS])
async def test_every_door_answers_only_its_own_names_and_pages(
    api: ApiProcess, method: str, path: str, body: object, status: int
):
    port = api.port
    # A program (no Origin) on the loopback names: as today.
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"):
        answered = await call(api, method, path, body, Host=host)
        assert answered.status_code == status, (host, answered.text)
    # The service's own page (Origin = the host the request went to), and a loopback page.
    for host, origin in [(f"localhost:{port}", f"http://localhost:{port}"), (f"127.0.0.1:{port}", f"http://[::1]:{port}")]:  # fmt: skip
        answered = await call(api, method, path, body, Host=host, Origin=origin)
        assert answered.status_code == status, (host, origin, answered.text)
    # DNS rebinding: the page's own name as Host and Origin, with the right token.
    rebound = await call(api, method, path, body, Host=f"{EVIL}:{port}", Origin=f"http://{EVIL}:{port}")
    assert rebound.status_code == 403, rebound.text
    assert (
        rebound.json()["error"]["type"] == "Forbidden"
        and "--allow-origin" in rebound.json()["error"]["message"]
    )
    # Another page against the right name; the right page against another name or port.
    for headers, code in [
        ({"Host": f"127.0.0.1:{port}", "Origin": f"http://{EVIL}"}, 403),
        ({"Host": f"127.0.0.1:{port}", "Origin": "null"}, 403),
        ({"Host": f"127.0.0.1:{port}", "Origin": f"http://127.0.0.1:{port + 1}"}, 403),
        ({"Host": f"{EVIL}:{port}"}, 421),
        ({"Host": f"127.0.0.1:{port + 1}"}, 421),
        ({"Host": "127.0.0.1"}, 421),
    ]:
        refused = await call(api, method, path, body, **headers)
        assert refused.status_code == code, (headers, refused.text)
    assert "--allow-host" in refused.json()["error"]["message"]


async def test_the_operators_hosts_origins_and_public_url(api: ApiProcess):
    port = api.port
    for headers in [
        {"Host": "agents.internal:9000"},  # --allow-host
        {"Host": "agents.internal:9000", "Origin": "http://agents.internal:9000"},  # its own page
        {"Host": "agents.example.com"},  # --public-url: any port, as a proxy forwards it
        {"Host": f"127.0.0.1:{port}", "Origin": "https://agents.example.com"},
        {"Host": f"127.0.0.1:{port}", "Origin": "https://app.example.com"},  # AGENT_ALLOWED_ORIGINS
        {"Host": f"127.0.0.1:{port}", "Origin": "https://other.example.com:8443"},
    ]:
        answered = await call(api, "GET", "/v1/sessions", None, **headers)
        assert answered.status_code == 200, (headers, answered.text)
    for headers, code in [
        ({"Host": "agents.internal:9001"}, 421),
        ({"Host": "agents.internal"}, 421),
        ({"Host": f"127.0.0.1:{port}", "Origin": "http://agents.example.com"}, 403),  # not https
        ({"Host": f"127.0.0.1:{port}", "Origin": "https://app.example.com:444"}, 403),
        ({"Host": f"127.0.0.1:{port}", "Origin": "https://other.example.com"}, 403),
    ]:
        refused = await call(api, "GET", "/v1/sessions", None, **headers)
        assert refused.status_code == code, (headers, refused.text)
    # The public URL is where the agent card sends A2A clients.
    card = await call(api, "GET", "/.well-known/agent-card.json", None, Host="agents.example.com")
    assert card.json()["url"] == f"{PUBLIC}/a2a"  # the 0.3 card
    card = await call(api, "GET", "/.well-known/agent-card.json", None, **{"A2A-Version": "1.0"})
    assert {i["url"] for i in card.json()["supportedInterfaces"]} == {f"{PUBLIC}/a2a"}


async def test_without_a_token_it_is_still_401_and_the_health_check_answers_any_name(api: ApiProcess):
    async with httpx.AsyncClient(base_url=api.url) as anonymous:
        assert (await anonymous.get("/v1/sessions")).status_code == 401
        assert (await anonymous.get("/v1/sessions", headers={"Host": EVIL})).status_code == 421
        health = await anonymous.get(
            "/healthz", headers={"Host": "10.1.2.3:8080", "Origin": f"http://{EVIL}"}
        )
        assert health.status_code == 200 and health.json() == {"status": "ok"}


@pytest.mark.parametrize(
    ("args", "env", "named"),
    [
        (["--allow-origin", "app.example.com"], {}, "allowed origin 'app.example.com'"),
        (["--allow-host", "http://x"], {}, "allowed host 'http://x'"),
        ([], {"AGENT_ALLOWED_HOSTS": "ok.example.com bad/host"}, "allowed host 'bad/host'"),
        (["--public-url", "agents.example.com"], {}, "public URL 'agents.example.com'"),
    ],
)
def test_a_value_that_is_no_host_or_origin_is_one_line_and_exit_1(
    args: list[str], env: dict[str, str], named: str, tmp_path: Path
):
    users = tmp_path / "users.toml"
    users.write_text(f'[users.alice]\ntoken = "{TOKENS["alice"]}"\n')
    done = subprocess.run(
        [sys.executable, "api.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={**os.environ, "AGENT_API_USERS": str(users), "TEMPORAL_ADDRESS": "127.0.0.1:1", **env},
    )  # fmt: skip
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert named in lines[0], lines
