"""`python -m tests.measure_reads`: what a read costs now that it is a replay, not a query.

On a dev server of its own, with the fake model and a `worker.py` process (this process
only reads, as api.py or a script would):

- `--steps 10,1000`: for a session of each length, then waiting for approval, the CPU of
  one `status` read in the reading process: cold (a replay of the current run) and warm
  (the history has not grown: the kept answer), and the run's length in events;
- `--poll-seconds 300`: a working session polled once a second through `client.py status
  --json` and `GET /v1/sessions/{id}` for that long: the queries, updates and signals, and
  the billable actions the server counted, meanwhile (all should be 0);
- `--sessions 10000`: that many sessions waiting for approval, listed through
  `GET /v1/sessions` 200 at a time as an operator: each once, the time per page, and the
  billable actions counted meanwhile.

Each part prints a JSON line of its figures; docs/operations/sizing.md quotes them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.service import RPCError

from bench.economy import metrics_url, scrape
from devservers import temporal_server
from devservers.fakemodel import FakeModelServer
from infra.connection import connect
from sessions import control, reading
from tests.support.api import api_env, start_api, users_toml
from tests.support.procs import Workers, wait_polling
from workflows.agent import AgentWorkflow
from workflows.contract import Limits, SessionInput

ROOT = Path(__file__).resolve().parents[1]
EMAIL = {"to": "team@example.com", "subject": "hi", "body": "x"}
BILLED = ("requests:QueryWorkflow", "requests:UpdateWorkflowExecution", "requests:SignalWorkflowExecution")


def steps_then_approval(steps: int) -> list[dict[str, Any]]:
    turns = [
        {"tool_calls": [{"name": "get_time", "input": {"timezone_name": "UTC"}, "id": f"t{i}"}]}
        for i in range(steps - 1)
    ]
    return [*turns, {"tool_calls": [{"name": "send_email", "input": EMAIL, "id": "e1"}]}, {"text": "Sent."}]


async def waiting(client: Client, session_id: str, timeout: float) -> None:
    """Asked of the worker (a query): a replay here, in the worker's process, would take the
    CPU the worker needs while it runs the session."""
    deadline = time.monotonic() + timeout
    handle = client.get_workflow_handle(session_id)
    while (await handle.query(AgentWorkflow.status)).status != "waiting_approval":
        if time.monotonic() > deadline:
            raise TimeoutError(f"{session_id} never waited for approval")
        await asyncio.sleep(2)


async def read_cost(client: Client, fake: FakeModelServer, queue: str, steps: int) -> dict[str, Any]:
    session_id = f"reads-{steps}-{uuid.uuid4().hex[:6]}"
    fake.script.set(session_id, steps_then_approval(steps))
    limits = Limits(max_steps=steps + 5, token_budget=10**12)
    await control.start(client, SessionInput(goal="measure", limits=limits), session_id, task_queue=queue)  # fmt: skip
    await waiting(client, session_id, timeout=60 + steps * 0.5)
    described = await client.get_workflow_handle(session_id).describe()
    cold, warm = [], []
    for _ in range(5):
        reading._readers.clear()  # pyright: ignore[reportPrivateUsage]: a cold reader, as in a new process
        began = time.process_time()
        await control.status(client, session_id)
        cold.append(time.process_time() - began)
        began = time.process_time()
        await control.status(client, session_id)
        warm.append(time.process_time() - began)
    return {"part": "read", "steps": steps, "run events": described.history_length,
            "cold read CPU ms": round(1000 * min(cold), 1), "warm read CPU ms": round(1000 * min(warm), 1)}  # fmt: skip


def cli(env: dict[str, str], *args: str) -> str:
    import subprocess

    done = subprocess.run([sys.executable, "client.py", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120, check=True)  # fmt: skip
    return done.stdout


async def poll(client: Client, fake: FakeModelServer, server: Any, api_url: str, env: dict[str, str],
               seconds: float) -> dict[str, Any]:  # fmt: skip
    import httpx2 as httpx

    from tests.support.api import TOKENS

    session_id = f"poll-{uuid.uuid4().hex[:6]}"
    # A step every 2 s or so for the whole poll, then a wait for approval.
    turns = [
        {"tool_calls": [{"name": "get_time", "input": {}, "id": f"t{i}"}], "delay": 2.0}
        for i in range(int(seconds / 2))
    ]
    fake.script.set(
        session_id, [*turns, {"tool_calls": [{"name": "send_email", "input": EMAIL, "id": "e1"}]}]
    )
    url = metrics_url(server)
    async with httpx.AsyncClient(
        base_url=api_url, headers={"Authorization": f"Bearer {TOKENS['alice']}"}, timeout=60
    ) as http:
        before = scrape(url)
        body = {"goal": "poll me", "session_id": session_id, "max_steps": len(turns) + 5}
        started = await http.post("/v1/sessions", json=body)
        assert started.status_code == 201, started.text
        polls, deadline = 0, time.monotonic() + seconds
        while time.monotonic() < deadline:
            tick = time.monotonic()
            json.loads(await asyncio.to_thread(cli, env, "status", session_id, "--json"))
            (await http.get(f"/v1/sessions/{session_id}")).raise_for_status()
            polls += 2
            await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
        await asyncio.sleep(2)  # the counters lag
        after = scrape(url)
    grew = {
        k: int(after.get(k, 0) - before.get(k, 0)) for k in after if k in BILLED or k.startswith("action:")
    }
    steps = (await control.status(client, session_id)).steps
    with contextlib.suppress(RPCError):
        await client.get_workflow_handle(session_id).terminate(reason="measured")
    return {"part": "poll", "seconds": seconds, "polls": polls, "steps meanwhile": steps,
            "queries, updates, signals": sum(grew.get(k, 0) for k in BILLED),
            "the session's own actions (server's counter)": {k: v for k, v in grew.items() if v and k not in BILLED}}  # fmt: skip


async def paged_list(client: Client, fake: FakeModelServer, server: Any, api_url: str, queue: str,
                     count: int) -> dict[str, Any]:  # fmt: skip
    import httpx2 as httpx

    from tests.support.api import TOKENS

    ids = [f"many-{i:05d}-{uuid.uuid4().hex[:4]}" for i in range(count)]
    for session_id in ids:
        fake.script.set(session_id, [{"tool_calls": [{"name": "send_email", "input": EMAIL, "id": "e1"}]}])
    began = time.monotonic()
    gate = asyncio.Semaphore(50)

    async def start(session_id: str) -> None:
        async with gate:
            await control.start(client, SessionInput(goal="wait", user_id="alice", search_attributes=True), session_id,
                                task_queue=queue)  # fmt: skip

    await asyncio.gather(*(start(s) for s in ids))
    started = time.monotonic() - began
    query = "WorkflowType = 'AgentWorkflow' AND AgentStatus = 'waiting_approval'"
    while (await client.count_workflows(query)).count < count:
        await asyncio.sleep(2)
    waited = time.monotonic() - began
    url = metrics_url(server)
    before = scrape(url)
    seen: list[str] = []
    pages: list[float] = []
    async with httpx.AsyncClient(
        base_url=api_url, headers={"Authorization": f"Bearer {TOKENS['olga']}"}, timeout=600
    ) as http:
        token = None
        while True:
            tick = time.monotonic()
            params = {"limit": 200, **({"page_token": token} if token else {})}
            answered = (await http.get("/v1/sessions", params=params)).json()
            pages.append(time.monotonic() - tick)
            seen += [s["session_id"] for s in answered["sessions"] if "unavailable" not in s]
            if not (token := answered["next_page_token"]):
                break
    await asyncio.sleep(2)
    after = scrape(url)
    grew = {
        k: int(after.get(k, 0) - before.get(k, 0)) for k in after if k in BILLED or k.startswith("action:")
    }
    wanted = set(ids)
    mine = [s for s in seen if s in wanted]
    return {"part": "list", "sessions": count, "started in s": round(started, 1), "all waiting after s": round(waited, 1),
            "pages": len(pages), "each once": len(mine) == len(set(mine)) == count,
            "page s (median, max)": (round(sorted(pages)[len(pages) // 2], 2), round(max(pages), 2)),
            "queries, updates, signals": sum(grew.get(k, 0) for k in BILLED),
            "actions counted meanwhile": {k: v for k, v in grew.items() if v and k not in BILLED}}  # fmt: skip


async def main(steps: list[int], poll_seconds: float, sessions: int) -> None:
    data = Path(tempfile.mkdtemp(prefix="agent-reads-"))
    os.environ["AGENT_DATA_DIR"] = str(data)
    server = temporal_server.start(db_file=data / "temporal.db")
    fake = FakeModelServer().start()
    # The worker in a process of its own, as in production: this process only reads.
    workers = Workers(address=server.address, model_url=fake.url, data_dir=data, log_dir=data)
    queue = workers.task_queue
    users = data / "users.toml"
    users.write_text(users_toml())
    env = api_env(server.address, queue, data, users)
    api = start_api(env, data / "api.log")
    try:
        client = await connect(target_host=server.address)
        await wait_polling(client, workers.start())
        for n in steps:
            print(json.dumps(await read_cost(client, fake, queue, n)), flush=True)
        if poll_seconds:
            print(json.dumps(await poll(client, fake, server, api.url, env, poll_seconds)), flush=True)
        if sessions:
            print(json.dumps(await paged_list(client, fake, server, api.url, queue, sessions)), flush=True)
    finally:
        workers.close()
        api.stop()
        fake.stop()
        server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--steps", default="10,1000", help="session lengths to read, comma-separated ('' for none)"
    )
    parser.add_argument("--poll-seconds", type=float, default=300)
    parser.add_argument("--sessions", type=int, default=10_000, help="sessions to list (0: none)")
    args = parser.parse_args()
    asyncio.run(main([int(s) for s in args.steps.split(",") if s], args.poll_seconds, args.sessions))
