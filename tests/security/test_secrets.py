"""Secrets stay where they belong. A stdio MCP server gets only what its definition names
(`env`, `env_passthrough`) and a minimal base, never the worker's keys. The page's cookie
is signed with the service's own key (`AGENT_COOKIE_SECRET`, else a 0600 file in the data
directory), not with anything in the users file; it expires, survives a restart, and dies
with its user's token. A token sent in `/?token=` is traded for the cookie, redirected
away, and never written to api.py's log."""

from __future__ import annotations

import hashlib
import hmac
import json
import stat
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.client import Client as TemporalClient

from activities.mcp import McpActivities
from activities.transcript import TranscriptStore
from devservers import temporal_server
from devservers.fakemodel import FakeModelServer
from infra.definitions import McpServer
from service.auth import COOKIE, Cookies, User
from tests.support.api import TOKENS, ApiProcess, serve_api
from tests.test_mcp import request

pytestmark = pytest.mark.xdist_group("security-secrets")
ROOT = Path(__file__).resolve().parents[2]
SECRETS = {
    "ANTHROPIC_API_KEY": "sk-ant-secret",
    "OPENAI_API_KEY": "sk-openai-secret",
    "AGENT_WEBHOOK_SECRET": "webhook-secret",
    "AGENT_PAYLOAD_KEYS": "k1:" + "A" * 43 + "=",
    "AGENT_COOKIE_SECRET": "c" * 64,
    "AGENT_LIVE_SECRET": "l" * 64,
    "TEMPORAL_API_KEY": "temporal-secret",
    "AWS_ACCESS_KEY_ID": "AKIASECRET",
    "AWS_SECRET_ACCESS_KEY": "aws-secret",
}


async def test_a_stdio_mcp_server_gets_only_what_its_definition_names(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    for name, value in {**SECRETS, "NOTES_DIR": "/srv/notes", "LC_ALL": "C.UTF-8"}.items():
        monkeypatch.setenv(name, value)  # the worker's environment
    server = McpServer(
        command=[sys.executable, "-m", "tests.support.mcp_servers", "--stdio"],
        env={"MCP_TEST_GREETING": "hi"},
        env_passthrough=["NOTES_DIR", "NOT_SET_ANYWHERE"],
    )
    mcp = McpActivities({"local": server}, store=TranscriptStore(tmp_path / "transcripts"))
    try:
        seen = json.loads((await mcp.call_mcp_tool(request("local__environment", {}))).content)
    finally:
        await mcp.aclose()
    leaked = sorted(k for k in seen if k in SECRETS or k.startswith("AWS_"))
    assert leaked == [], leaked
    assert seen["MCP_TEST_GREETING"] == "hi" and seen["NOTES_DIR"] == "/srv/notes"
    assert seen["LC_ALL"] == "C.UTF-8" and "PATH" in seen and "NOT_SET_ANYWHERE" not in seen


@pytest_asyncio.fixture(scope="module")
async def api(
    client: TemporalClient, dev_server: temporal_server.DevServer, fake_model: FakeModelServer, data_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[ApiProcess]:  # fmt: skip
    # Its own data directory: the cookie key file is made there, on first use.
    folder = tmp_path_factory.mktemp("secrets")
    (folder / "data").mkdir()
    async with serve_api(
        client, dev_server.address, fake_model, data_dir, folder, env={"AGENT_DATA_DIR": str(folder / "data")}
    ) as server:  # fmt: skip
        yield server


def todays_cookie(user: str, token: str) -> str:
    """The cookie anyone who reads the users file could make before: keyed with token_sha256."""
    digest = hashlib.sha256(token.encode()).digest()
    return f"{user}.{hmac.new(digest, f'cookie:{user}'.encode(), hashlib.sha256).hexdigest()}"


async def me_with(api: ApiProcess, cookie: str) -> int:
    async with api.client(None, headers={"Cookie": f"{COOKIE}={cookie}"}) as browser:
        return (await browser.get("/v1/me")).status_code


async def page_cookie(api: ApiProcess, user: str, token: str | None = None) -> str:
    async with api.client(None) as browser:
        opened = await browser.get("/", params={"token": token or TOKENS[user]})
    assert opened.status_code == 303 and opened.headers["location"] == "/", opened.headers
    assert "max-age=43200" in opened.headers["set-cookie"].lower(), opened.headers["set-cookie"]
    return opened.cookies[COOKIE]


async def test_the_cookie_is_the_services_to_sign_and_it_ends(api: ApiProcess):
    folder = api.log_file.parent
    assert await me_with(api, todays_cookie("olga", TOKENS["olga"])) == 401
    alice = await page_cookie(api, "alice")
    assert await me_with(api, alice) == 200
    key_file = folder / "data" / "cookie-secret"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    # Made from the users file alone (the token's hash as the key), in the new form: refused.
    alice_sha = hashlib.sha256(TOKENS["alice"].encode()).digest()
    assert await me_with(api, Cookies(alice_sha.hex().encode(), 12).mint(user("alice"))) == 401
    # Made with the right key, but expired.
    key = key_file.read_bytes().strip()
    assert await me_with(api, Cookies(key, 12).mint(user("alice"), now=time.time() - 13 * 3600)) == 401
    assert await me_with(api, Cookies(key, 12).mint(user("alice"))) == 200
    # A restart keeps the page's sessions; a new token for carol ends hers.
    users = folder / "users.toml"
    users.write_text(users.read_text() + '\n[users.carol]\ntoken = "carol-token-1"\n')
    api.restart()
    assert await me_with(api, alice) == 200
    carol = await page_cookie(api, "carol", "carol-token-1")
    users.write_text(users.read_text().replace("carol-token-1", "carol-token-2"))
    api.restart()
    assert await me_with(api, carol) == 401
    assert await me_with(api, alice) == 200


def user(name: str) -> User:
    return User(name=name, token_sha256=hashlib.sha256(TOKENS[name].encode()).digest())


async def test_a_token_in_the_address_is_traded_and_never_logged(api: ApiProcess):
    await page_cookie(api, "bob")
    async with api.client(None) as browser:
        wrong = await browser.get("/", params={"token": "wrong-token-looking-secret"})
        assert wrong.status_code == 401
        await browser.get("/v1/me", params={"token": TOKENS["olga"]})  # not a way in, but still not logged
    log = api.log_file.read_text()
    assert "GET /?token=" in log, log[-2000:]  # the access log is on, and says what was asked
    for token in (TOKENS["bob"], TOKENS["olga"], "wrong-token-looking-secret"):
        assert token not in log, f"{token} in api.py's log"
