"""The entry points: what they import, how they refuse a start, and how a setting whose
extra is not installed stops them.

- `--help` of every entry point, and `client.py status`, import no model provider SDK
  (anthropic, openai), no MCP SDK and no web framework (fastapi, starlette, uvicorn); the
  `--help` of this project's own entry points not even Temporal's SDK. What a process
  imported is read from `python -X importtime`, which lists every module it loaded.
- `client.py start` and `POST /v1/sessions` refuse the same start input with the same
  message (`sessions.start_input.resolve`).
- A process started with a setting that needs an extra (`AGENT_STORE_URL=s3://...`,
  `OTEL_*`, `--metrics-port`, the codec endpoint) whose module cannot be imported
  (`sys.modules[name] = None` before the entry point runs) exits 1 at start with one line
  naming the extra, on a real Temporal server it would otherwise have run against.
"""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from devservers import processes, temporal_server
from devservers.temporal_server import free_port
from tests.conftest import ROOT, Harness, answer
from tests.support.api import api_env, start_api, users_toml
from tests.support.reliability import record

AREA = "Bad input"
# Never on the way to Temporal: the model providers' SDKs, MCP's, the web framework's.
HEAVY = {"anthropic", "openai", "mcp", "fastapi", "starlette", "uvicorn"}
TIMEOUT = 60.0


def imported(
    args: list[str], env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run `python -X importtime ARGS`; its result and the top-level packages it imported."""
    run = subprocess.run(
        [sys.executable, "-X", "importtime", *args], cwd=ROOT, env=env or dict(os.environ),
        capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    names = {
        line.rsplit("|", 1)[1].strip().split(".")[0]
        for line in run.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert "argparse" in names, run.stderr[-2000:]  # the listing was read
    return run, names


OWN_HELP = [
    ["client.py", "--help"],
    ["client.py", "start", "--help"],
    ["client.py", "schedule", "create", "--help"],
    ["client.py", "status", "--help"],
    ["worker.py", "--help"],
    ["api.py", "--help"],
    ["mcp_server.py", "--help"],
    ["devserver.py", "--help"],
    ["demo.py", "--help"],
    ["-m", "infra.codec_server", "--help"],
    ["-m", "devservers.fakemodel", "--help"],
]


@pytest.mark.parametrize("args", OWN_HELP, ids=" ".join)
def test_help_imports_no_sdk(args: list[str]):
    run, names = imported(args)
    assert run.returncode == 0 and "usage:" in run.stdout, run.stderr[-2000:]
    assert not names & (HEAVY | {"temporalio"}), sorted(names & (HEAVY | {"temporalio"}))


def test_bench_help_imports_no_provider_mcp_or_web_framework():
    run, names = imported(["-m", "bench", "--help"])
    assert run.returncode == 0 and "usage:" in run.stdout, run.stderr[-2000:]
    assert not names & HEAVY, sorted(names & HEAVY)


async def test_status_imports_no_provider_mcp_or_web_framework(harness: Harness, dev_server):
    done = await harness.run([answer("all done")])
    env = {**os.environ, "TEMPORAL_ADDRESS": dev_server.address, "TEMPORAL_TASK_QUEUE": harness.task_queue}
    run, names = await asyncio.to_thread(imported, ["client.py", "status", done.session_id, "--json"], env)
    assert run.returncode == 0, run.stderr[-2000:]
    assert '"status": "completed"' in run.stdout, run.stdout
    assert "temporalio" in names  # it did talk to Temporal
    assert not names & HEAVY, sorted(names & HEAVY)
    loaded = {
        line.rsplit("|", 1)[1].strip() for line in run.stderr.splitlines() if line.startswith("import time:")
    }
    # A command that needs the client alone loads neither the follower, nor the start
    # input's checks, nor the schedules or the fork, nor an HTTP client: each is a tenth of
    # a second or more of the call (`client.py status` took 0.6 s with them, about 0.45 s without).
    unused = {"cli.watch", "sessions.live_text", "sessions.start_input", "sessions.schedules", "sessions.fork",
              "httpx", "httpx2"}  # fmt: skip
    assert not loaded & unused, sorted(loaded & unused)


# ---- one rule for a start input, at both edges --------------------------------------------

# name: (the API's body, the command line's flags, what the message says)
REFUSED = {
    "unknown provider": (
        {"model": "bogus:some-model"}, ["--model", "bogus:some-model"], "unknown model provider 'bogus'",
    ),
    "unknown agent": ({"agent": "nobody"}, ["--agent", "nobody"], "no agent 'nobody'"),
    "cost budget, no prices": (
        {"model": "openai:unpriced-model", "cost_budget": 1},
        ["--model", "openai:unpriced-model", "--cost-budget", "1"],
        "no prices for model 'openai:unpriced-model'",
    ),
}  # fmt: skip


async def test_client_and_api_refuse_a_start_alike(dev_server, data_dir: Path, tmp_path: Path):
    users = tmp_path / "users.toml"
    users.write_text(users_toml())
    env = api_env(dev_server.address, "refused-starts", data_dir, users)
    api = await asyncio.to_thread(start_api, env, tmp_path / "api.log")
    try:
        async with api.client("bob") as http:
            for name, (body, flags, needle) in REFUSED.items():
                response = await http.post("/v1/sessions", json={"goal": "go", **body})
                cli = await asyncio.to_thread(
                    subprocess.run, [sys.executable, "client.py", "start", "go", *flags], cwd=ROOT, env=env,
                    capture_output=True, text=True, timeout=TIMEOUT,
                )  # fmt: skip
                assert response.status_code == 422, (name, response.text)
                error = response.json()["error"]
                assert error["type"] == "InvalidInput" and needle in error["message"], (name, error)
                assert cli.returncode == 1, (name, cli.stderr)
                assert cli.stderr.strip() == f"error: {error['message']}", (name, cli.stderr)
            record(
                AREA, "a start the definitions or the prices refuse (unknown provider, unknown agent, "
                "cost budget without prices)",
                "client.py exits 1 and POST /v1/sessions answers 422 InvalidInput, with the same message",
            )  # fmt: skip
    finally:
        api.stop()


def test_a_bad_start_is_named_before_temporal_is_reached(tmp_path: Path):
    # Nothing listens on this port: the start's own mistake is still the line the person sees.
    env = {**os.environ, "TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}", "AGENT_DATA_DIR": str(tmp_path)}
    cases = [*((flags, needle) for _, flags, needle in REFUSED.values()),
             (["--every", "soon"], "--every 'soon': use a number and a unit")]  # fmt: skip
    for flags, needle in cases:
        command = ["schedule", "create", "nightly", "go"] if flags[0] == "--every" else ["start", "go"]
        cli = subprocess.run(
            [sys.executable, "client.py", *command, *flags], cwd=ROOT, env=env,
            capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert cli.returncode == 1 and needle in cli.stderr, (flags, cli.stderr)
        assert len(cli.stderr.strip().splitlines()) == 1, cli.stderr
    # A good start still says that the server is not there.
    cli = subprocess.run([sys.executable, "client.py", "start", "go"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL)  # fmt: skip
    assert cli.returncode == 1 and "python devserver.py" in cli.stderr, cli.stderr


# ---- a setting whose extra is missing -----------------------------------------------------


def blocked(argv: list[str], modules: list[str]) -> list[str]:
    """`python -c` that makes `modules` unimportable, then runs the entry point in `argv`."""
    if argv[0] == "-m":
        run = f"runpy.run_module({argv[1]!r}, run_name='__main__', alter_sys=True)"
        argv = argv[1:]
    else:
        run = f"runpy.run_path({argv[0]!r}, run_name='__main__')"
    block = f"for name in {modules!r}: sys.modules[name] = None"
    return [sys.executable, "-c", f"import runpy, sys\n{block}\nsys.argv = {argv!r}\n{run}"]


def run_blocked(argv: list[str], modules: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    process = subprocess.Popen(
        blocked(argv, modules), cwd=ROOT, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        out, err = process.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        processes.stop(process, grace=5)
        out, err = process.communicate()
        raise AssertionError(f"{' '.join(argv)} still ran after {TIMEOUT:g} s:\n{err[-3000:]}") from None
    return subprocess.CompletedProcess(argv, process.returncode, out, err)


def base_env(dev_server: temporal_server.DevServer, tmp_path: Path) -> dict[str, str]:
    unset = ("AGENT_STORE_URL", "AGENT_PAYLOAD_KEYS", "AGENT_API_USERS")
    env = {k: v for k, v in os.environ.items() if k not in unset and not k.startswith("OTEL_")}
    return {
        **env, "TEMPORAL_ADDRESS": dev_server.address, "TEMPORAL_TASK_QUEUE": f"extras-{tmp_path.name}",
        "AGENT_DATA_DIR": str(tmp_path), "ANTHROPIC_API_KEY": "not-used", "PYTHONUNBUFFERED": "1",
    }  # fmt: skip


STORE = "s3://agent-store/extras-test"
OTLP = "http://127.0.0.1:4318"
KEYS = "k1:" + base64.b64encode(b"k" * 32).decode()
S3_LINE = f"error: AGENT_STORE_URL={STORE} needs the s3 extra: pip install -e '.[s3]'"
# name: (entry point, modules that cannot be imported, settings, the one line it must print)
MISSING = {
    "worker, s3": (["worker.py"], ["aioboto3"], {"AGENT_STORE_URL": STORE}, S3_LINE),
    "api, s3": (["api.py", "--port", "{port}"], ["aioboto3"], {"AGENT_STORE_URL": STORE}, S3_LINE),
    "client, s3": (["client.py", "status", "a-session"], ["aioboto3"], {"AGENT_STORE_URL": STORE}, S3_LINE),
    "mcp server, s3": (["mcp_server.py"], ["aioboto3"], {"AGENT_STORE_URL": STORE}, S3_LINE),
    "worker, otel": (
        ["worker.py"], ["opentelemetry.sdk"], {"OTEL_EXPORTER_OTLP_ENDPOINT": OTLP},
        f"error: OTEL_EXPORTER_OTLP_ENDPOINT={OTLP} needs the otel extra: pip install -e '.[otel]'",
    ),
    "api, otel": (
        ["api.py", "--port", "{port}"], ["opentelemetry.sdk"], {"OTEL_TRACES_EXPORTER": "console"},
        "error: OTEL_TRACES_EXPORTER=console needs the otel extra: pip install -e '.[otel]'",
    ),
    "worker, metrics port": (
        ["worker.py", "--metrics-port", "{port}"], ["prometheus_client"], {},
        "error: --metrics-port needs the otel extra: pip install -e '.[otel]'",
    ),
    "devserver, codec": (
        ["devserver.py", "--port", "{port}", "--ui-port", "{port}", "--codec-port", "{port}"], ["starlette"],
        {"AGENT_PAYLOAD_KEYS": KEYS},
        "error: the codec endpoint for AGENT_PAYLOAD_KEYS needs the codec extra: pip install -e '.[codec]'",
    ),
    "codec server": (
        ["-m", "infra.codec_server", "--port", "{port}"], ["starlette"], {"AGENT_PAYLOAD_KEYS": KEYS},
        "error: the codec endpoint needs the codec extra: pip install -e '.[codec]'",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", MISSING)
def test_a_setting_whose_extra_is_missing_stops_the_process_at_start(case: str, dev_server, tmp_path: Path):
    argv, modules, settings, line = MISSING[case]
    argv = [arg.replace("{port}", str(free_port())) for arg in argv]
    run = run_blocked(argv, modules, {**base_env(dev_server, tmp_path), **settings})
    assert run.returncode == 1, (run.returncode, run.stderr[-3000:])
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    assert run.stderr.strip().splitlines() == [line], run.stderr[-3000:]
    record(AREA, f"{case}: the setting ({', '.join(settings) or argv[-2]}) without the extra's module "
           f"({', '.join(modules)})", f"exit 1 at start, one line: `{line}`")  # fmt: skip


def test_the_same_worker_starts_with_the_extra(dev_server, tmp_path: Path):
    """The control for the cases above: with nothing blocked, the S3 setting lets the worker
    start and poll (so the blocked module, not the setting, is what stopped it)."""
    env = {**base_env(dev_server, tmp_path), "AGENT_STORE_URL": STORE}
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "worker.py"], cwd=ROOT, env=env,
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + TIMEOUT
        while "worker on task queue" not in log.read_text(errors="replace"):
            assert process.poll() is None, log.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
            time.sleep(0.2)
    finally:
        processes.stop(process, grace=10)
