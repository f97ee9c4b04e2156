"""The `scale` scenario: N sessions waiting for a person, on one machine, with every part at
its defaults (the dev server, one `worker.py` without flags, `api.py`), then all approved.

For each N (100, 1,000 and 10,000; `--quick`: 20): N sessions are started through the
client library, 50 at a time, each scripted to ask for one approval (`send_email`) and then
answer. Recorded: the start rate; the time until every one waits (from the first start); the
worker's and the server's memory per waiting session (resident set, before the starts and
once all wait); the time of one page of `GET /v1/sessions` (200 rows); then every session
approved through `POST /v1/sessions/{id}/approve`, 50 at a time: the approve-all rate, and
for each session the time from its approval's answer to its completion (its close time in
Temporal's visibility), p50 and p99; and every error. Each N runs on a fresh task queue with
a fresh worker and API process, so no N inherits another's cache.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import percentile
from bench.contenders import FakeModel
from bench.procs import Child
from devservers.temporal_server import free_port

USER = "bench"
TOKEN = "bench-token-" + "x" * 16
AT_ONCE = 50
PAGE = 200
TURNS = [
    {"tool_calls": [{"name": "send_email", "id": "e1",
                     "input": {"to": "team@example.com", "subject": "Report", "body": "Done."}}]},
    {"text": "Sent."},
]  # fmt: skip


async def run(address: str, server: Any, fake: FakeModel, env: dict[str, str], work: Path,
              sizes: tuple[int, ...], results: dict[str, Any], log: Callable[[str], None]) -> None:  # fmt: skip
    """Every size in turn; `results[str(N)]` gets its figures."""
    users = work / "bench-users.toml"
    users.write_text(f'[users.{USER}]\ntoken = "{TOKEN}"\n')
    for n in sizes:
        log(f"scale: {n} sessions waiting for an approval, then all approved")
        results[str(n)] = found = await _one(n, address, server, fake, env, work, users, log)
        log("  " + ", ".join(f"{k} {_fmt(v)}" for k, v in found.items()))


def _fmt(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


async def _one(n: int, address: str, server: Any, fake: FakeModel, env: dict[str, str], work: Path,
               users: Path, log: Callable[[str], None]) -> dict[str, Any]:  # fmt: skip
    from infra.connection import connect

    queue = f"scale-{n}-{uuid.uuid4().hex[:6]}"
    child_env = {**env, "TEMPORAL_ADDRESS": address, "TEMPORAL_TASK_QUEUE": queue, "ANTHROPIC_BASE_URL": fake.url,
                 "ANTHROPIC_API_KEY": "bench", "AGENT_API_USERS": str(users), "PYTHONUNBUFFERED": "1"}  # fmt: skip
    worker = Child("worker", ["worker.py"], child_env, work / f"scale-{n}-worker.log", ready_line=False)
    port = free_port()
    api = Child(
        "api", ["api.py", "--port", str(port)], child_env, work / f"scale-{n}-api.log", ready_line=False
    )
    client = await connect(target_host=address)
    try:
        await _ready(work / f"scale-{n}-worker.log", "worker on task queue", worker)
        base = f"http://127.0.0.1:{port}"
        await _healthy(base, api)
        return await _measure(n, client, queue, fake, worker, server, base)
    finally:
        api.stop()
        worker.stop()


async def _ready(log_file: Path, line: str, child: Child, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while line not in log_file.read_text(errors="replace"):
        if child.process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{child.name} did not start; see {log_file}")
        await asyncio.sleep(0.2)


async def _healthy(base: str, child: Child, timeout: float = 60) -> None:
    import httpx2 as httpx

    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient() as http:
        while True:
            try:
                if (await http.get(base + "/healthz")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if child.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("api.py did not start")
            await asyncio.sleep(0.2)


def _rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


async def _gated(count: int, make: Callable[[int], Any]) -> list[Any]:
    gate = asyncio.Semaphore(AT_ONCE)

    async def one(i: int) -> Any:
        async with gate:
            try:
                return await make(i)
            except Exception as err:  # counted, never fatal: the figures say how many failed
                return err

    return await asyncio.gather(*(one(i) for i in range(count)))


def _kind(err: Exception) -> str:
    """An error in a few words: its type, and an HTTP answer's status."""
    status = getattr(getattr(err, "response", None), "status_code", None)
    return type(err).__name__ + (f" {status}" if status is not None else "")


async def _wait_count(client: Any, query: str, n: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while (await client.count_workflows(query)).count < n:
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.5)
    return True


async def _measure(n: int, client: Any, queue: str, fake: FakeModel, worker: Child, server: Any,
                   base: str) -> dict[str, Any]:  # fmt: skip
    import httpx2 as httpx

    from sessions import control
    from workflows.contract import SessionInput

    ids = [f"scale-{n}-{i}-{uuid.uuid4().hex[:6]}" for i in range(n)]
    await asyncio.to_thread(lambda: [fake.set_turns(s, TURNS) for s in ids])
    worker_before, server_before = _rss_mb(worker.pid), _rss_mb(server.pid)
    session_input = SessionInput(goal="send the report", user_id=USER, search_attributes=True)
    started = time.monotonic()
    starts = await _gated(n, lambda i: control.start(client, session_input, ids[i], task_queue=queue))
    start_s = time.monotonic() - started
    errors = sum(isinstance(s, Exception) for s in starts)
    waiting = await _wait_count(client, f"TaskQueue = '{queue}' AND AgentStatus = 'waiting_approval'",
                                n - errors, timeout=600 + n)  # fmt: skip
    to_waiting_s = time.monotonic() - started
    worker_after, server_after = _rss_mb(worker.pid), _rss_mb(server.pid)
    headers = {"authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=120) as http:
        pages = []
        for _ in range(3):
            asked = time.monotonic()
            page = await http.get("/v1/sessions", params={"limit": PAGE})
            pages.append(time.monotonic() - asked)
            errors += page.status_code != 200
        approved_at: dict[str, float] = {}

        async def approve(i: int) -> None:
            answer = await http.post(f"/v1/sessions/{ids[i]}/approve", json={"tool_use_id": "e1"})
            answer.raise_for_status()
            approved_at[ids[i]] = time.time()

        asked = time.monotonic()
        approvals = await _gated(n, approve)
        approve_s = time.monotonic() - asked
    errors += sum(isinstance(a, Exception) for a in approvals)
    done = await _wait_count(client, f"TaskQueue = '{queue}' AND ExecutionStatus = 'Completed'",
                             len(approved_at), timeout=600 + n)  # fmt: skip
    closed = {e.id: e.close_time.timestamp() async for e in client.list_workflows(
        f"TaskQueue = '{queue}' AND ExecutionStatus = 'Completed'") if e.close_time}  # fmt: skip
    latencies = [closed[s] - at for s, at in approved_at.items() if s in closed]
    errors += n - len(closed)
    kinds = Counter(_kind(e) for e in [*starts, *approvals] if isinstance(e, Exception))

    def per_session(before: float | None, after: float | None) -> float | None:
        return None if before is None or after is None else (after - before) * 1024 / n

    return {
        "sessions": n, "errors": errors, "error_kinds": dict(kinds.most_common(5)), "all_waited": waiting, "all_completed": done,
        "start_per_s": n / start_s, "to_waiting_s": to_waiting_s,
        "worker_kb_per_session": per_session(worker_before, worker_after),
        "server_kb_per_session": per_session(server_before, server_after),
        "worker_mb_waiting": worker_after, "server_mb_waiting": server_after,
        "list_page_s": statistics.median(pages),
        "approve_per_s": n / approve_s, "approve_all_s": approve_s,
        "completion_p50_s": percentile(latencies, 50) if latencies else None,
        "completion_p99_s": percentile(latencies, 99) if latencies else None,
        "cores": len(os.sched_getaffinity(0)),
    }  # fmt: skip
