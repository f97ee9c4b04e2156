"""The MCP server against the protocol's official conformance suite
(`@modelcontextprotocol/conformance`, server mode, Node 22, both from the npm registry):
`/mcp` of a real `python api.py` and the stdio server `python mcp_server.py` (put behind
HTTP by supergateway). Every scenario that does not need the suite's own fixture server
runs (over stdio, four in the default run and all in the slow one), and none may fail; the excluded ones, each with its reason, are in
tests/support/conformance.py and docs/reference/conformance.md.

Outside CI a missing suite skips these tests, saying how to install it; under CI=true it
fails them (.ci/run installs it)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.client import Client

from devservers import temporal_server
from devservers.fakemodel import FakeModelServer
from tests.support import conformance
from tests.support.api import TOKENS, ApiProcess, serve_api
from tests.support.needs import require
from tests.support.reliability import record

pytestmark = pytest.mark.xdist_group("conformance-mcp")
DOCS = Path(__file__).resolve().parents[1] / "docs" / "reference" / "conformance.md"


@pytest.fixture(scope="module")
def scenarios() -> list[str]:
    require(
        "the MCP conformance suite with Node 22", conformance.installed(),
        "npm ci --prefix tests/conformance",
    )  # fmt: skip
    return conformance.scenarios()


@pytest_asyncio.fixture(scope="module")
async def api(
    client: Client, dev_server: temporal_server.DevServer, fake_model: FakeModelServer, data_dir: Path,
    tmp_path_factory: pytest.TempPathFactory, scenarios: list[str],
) -> AsyncIterator[ApiProcess]:  # fmt: skip
    async with serve_api(
        client, dev_server.address, fake_model, data_dir, tmp_path_factory.mktemp("conformance")
    ) as server:
        yield server


def failures(checks: list[conformance.Check]) -> list[str]:
    return [f"{c.scenario}/{c.id}: {c.message}" for c in checks if c.status == "FAILURE"]


def test_every_excluded_scenario_is_the_suites_and_documented(scenarios: list[str]):
    excluded = {**conformance.FIXTURE_SCENARIOS, **conformance.HTTP_ONLY}
    assert set(excluded) <= set(scenarios), set(excluded) - set(scenarios)
    documented = DOCS.read_text()
    assert all(f"`{name}`" in documented for name in excluded), [
        n for n in excluded if f"`{n}`" not in documented
    ]


async def test_mcp_over_http_passes_every_scenario_that_applies(
    api: ApiProcess, scenarios: list[str], tmp_path: Path
):
    applicable = [s for s in scenarios if s not in conformance.FIXTURE_SCENARIOS]
    assert "dns-rebinding-protection" in applicable and "logging-set-level" in applicable
    async with conformance.token_proxy(api.url, TOKENS["olga"]) as url:
        checks = await conformance.run_all(f"{url}/mcp", applicable, tmp_path)
    assert {c.scenario for c in checks} == set(applicable)
    assert not failures(checks), failures(checks)
    assert sum(c.status == "SUCCESS" for c in checks) >= len(applicable)
    record(
        "Protocol conformance",
        "the MCP conformance suite (@modelcontextprotocol/conformance, server mode) against /mcp: every "
        "scenario that does not need its fixture server, a forged Host and Origin among them",
        "every scenario passes; the excluded ones are in docs/reference/conformance.md",
        _figures(checks, applicable, scenarios),
    )


# Each stdio scenario starts `python mcp_server.py` (seconds of imports): the default run
# keeps a short form, the slow run has them all.
STDIO_SHORT = ["server-initialize", "logging-set-level", "tools-list", "prompts-list"]


@pytest.mark.parametrize("which", ["short", pytest.param("all", marks=pytest.mark.slow)])
async def test_the_stdio_server_passes_every_scenario_that_applies(
    api: ApiProcess, scenarios: list[str], tmp_path: Path, which: str
):
    applicable = [
        s for s in scenarios if s not in conformance.FIXTURE_SCENARIOS and s not in conformance.HTTP_ONLY
    ]
    if which == "short":
        assert set(STDIO_SHORT) <= set(applicable)
        applicable = STDIO_SHORT
    env = {**api.env}
    env.pop("AGENT_API_USERS", None)
    with conformance.stdio_bridge(env, tmp_path / "bridge.log") as url:
        checks = await conformance.run_all(url, applicable, tmp_path)
    assert {c.scenario for c in checks} == set(applicable)
    assert not failures(checks), failures(checks)
    # Our server answered, not the bridge.
    assert "temporal-agent-loop" in (tmp_path / "bridge.log").read_text()
    record(
        "Protocol conformance",
        "the MCP conformance suite against python mcp_server.py (stdio, behind supergateway): "
        + ("every scenario that applies" if which == "all" else f"its short form ({', '.join(STDIO_SHORT)})"),
        "every scenario passes",
        _figures(checks, applicable, scenarios),
    )


def _figures(checks: list[conformance.Check], ran: list[str], listed: list[str]) -> dict[str, object]:
    return {
        "scenarios run": f"{len(ran)} of {len(listed)}",
        "checks passed": sum(c.status == "SUCCESS" for c in checks),
        "failed": len(failures(checks)),
        "warnings": sum(c.status == "WARNING" for c in checks),
    }
