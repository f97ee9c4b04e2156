"""A read never waits on a busy worker: with the session's worker process stopped
(SIGSTOP, by its PID), A2A's GetTask and ListTasks and the API's `GET /v1/sessions/{id}`
answer from the session's history at once, and the worker, continued (SIGCONT), carries
the session on."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from pathlib import Path

import pytest
from a2a.types.a2a_pb2 import GetTaskRequest, ListTasksRequest, TaskState

from tests.conftest import answer, tool_use
from tests.support.api import api_env, start_api, users_toml
from tests.support.procs import ProcessHarness
from tests.support.reliability import record
from tests.test_a2a import EMAIL, agent, answer_of, message, pending, send

AREA = "Free reads and paged lists"
READ_WITHIN_S = 15.0  # a read that waited on the stopped worker would take 20 s, then fail


@pytest.mark.process
async def test_an_a2a_get_under_a_stopped_worker_answers(
    procs: ProcessHarness, dev_server, data_dir: Path, tmp_path: Path
):
    worker = await procs.worker()
    users = tmp_path / "users.toml"
    users.write_text(users_toml())
    api = start_api(api_env(dev_server.address, procs.task_queue, data_dir, users), tmp_path / "api.log")
    session_id = f"busy-{uuid.uuid4().hex[:10]}"
    procs.fake_model.script.set(session_id, [tool_use("send_email", EMAIL, id="e1"), answer("Sent it.")])
    try:
        async with agent(api, "alice") as alice, api.client("alice") as http:
            task = await send(alice, message(text="email the team", context_id=session_id))
            assert [p["tool_use_id"] for p in pending(task)] == ["e1"]
            os.kill(worker.pid, signal.SIGSTOP)
            try:
                began = time.monotonic()
                got = await asyncio.wait_for(alice.get_task(GetTaskRequest(id=task.id)), READ_WITHIN_S)
                listed = await asyncio.wait_for(
                    alice.list_tasks(ListTasksRequest(context_id=session_id)), READ_WITHIN_S
                )
                status = await asyncio.wait_for(http.get(f"/v1/sessions/{session_id}"), READ_WITHIN_S)
                took = time.monotonic() - began
            finally:
                os.kill(worker.pid, signal.SIGCONT)
            assert got.status.state == TaskState.TASK_STATE_INPUT_REQUIRED, got
            assert [t.id for t in listed.tasks] == [task.id] and listed.total_size == 1
            assert status.status_code == 200 and status.json()["status"] == "waiting_approval", status.text
            done = await send(alice, message(data={"approve": "e1"}, task_id=task.id, context_id=session_id))
            assert done.status.state == TaskState.TASK_STATE_COMPLETED and answer_of(done) == "Sent it."
    finally:
        api.stop()
    record(
        AREA,
        "the worker process of a session waiting for approval stopped with SIGSTOP; A2A GetTask and "
        "ListTasks and GET /v1/sessions/{id} asked meanwhile, then the worker continued",
        "each answered the task's state from the session's history while the worker was stopped; once "
        "continued, the worker took the approval and the session completed",
        {"three reads while stopped (s)": round(took, 2)},
    )
