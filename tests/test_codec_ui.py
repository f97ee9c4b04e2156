"""With AGENT_PAYLOAD_KEYS set, Temporal stores ciphertext, and the Temporal UI shows the
session's goal decoded through the codec endpoint (infra/codec_server.py), in
headless Chromium (Debian's `chromium`)."""

from __future__ import annotations

import asyncio
import base64
import os
import uuid
from pathlib import Path

import pytest

from devservers import processes, temporal_server
from infra import codec_server
from infra.connection import connect
from tests.conftest import OUTPUT, answer, model_activities
from tests.support.reliability import record
from tests.support.tools import TOOLS
from tests.test_ui_browser import chromium, page_text, rendered_frames
from worker import build_worker
from workflows.agent import AgentWorkflow
from workflows.contract import SessionInput

GOAL = "Summarise the quarterly numbers for the board, privately."

pytestmark = pytest.mark.usefixtures("chromium_installed")  # a skip, or a failure under CI=true


async def test_the_ui_shows_the_goal_decoded_through_the_codec_endpoint(
    tmp_path: Path, fake_model, data_dir: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("AGENT_PAYLOAD_KEYS", "k1:" + base64.b64encode(os.urandom(32)).decode())
    ui_port, codec_port = temporal_server.free_port(), temporal_server.free_port()
    codec = codec_server.spawn(codec_port, tmp_path / "codec.log", ui_port=ui_port)
    server = temporal_server.start(
        ui_port=ui_port, db_file=tmp_path / "temporal.db", codec_endpoint=f"http://127.0.0.1:{codec_port}"
    )
    try:
        await _wait_for_port(codec_port)
        client = await connect(target_host=server.address)
        queue, session = f"codec-{uuid.uuid4().hex[:8]}", f"codec-{uuid.uuid4().hex[:8]}"
        fake_model.script.set(session, [answer("Done, privately.")])
        # The worker stays up while Chromium loads the page: the UI queries the workflow's
        # metadata, and with no worker to answer, that query holds the page for 30 s.
        async with build_worker(client, TOOLS, queue=queue, model=model_activities(fake_model, data_dir)):
            handle = await client.start_workflow(
                AgentWorkflow.run, SessionInput(goal=GOAL), id=session, task_queue=queue, static_summary=GOAL
            )
            assert (await asyncio.wait_for(handle.result(), 60)).status == "completed"
            run_id = (await handle.describe()).run_id
            stored = (tmp_path / "temporal.db").read_bytes()
            assert GOAL.encode() not in stored  # ciphertext at rest

            page = f"http://127.0.0.1:{ui_port}/namespaces/default/workflows/{session}/{run_id}/user-metadata"
            OUTPUT.mkdir(exist_ok=True)
            dom = await asyncio.to_thread(chromium, page, tmp_path / "profile", "--dump-dom")
            shot = OUTPUT / "ui-codec-metadata.png"
            shot.unlink(missing_ok=True)
            await asyncio.to_thread(chromium, page, tmp_path / "shot-profile", f"--screenshot={shot}")
        frames = rendered_frames(dom)
        assert frames.get("user-metadata-summary") == GOAL, (frames, page_text(dom)[:2000])
        assert shot.exists() and shot.stat().st_size > 10_000
        record(
            "Encrypted payloads",
            "the Temporal UI with the codec endpoint, keys set",
            "the database holds no plaintext of the goal; the UI shows the goal decoded (headless Chromium)",
            {},
        )
    finally:
        server.stop()
        processes.stop(codec, grace=10)


async def _wait_for_port(port: int, timeout: float = 20) -> None:
    for _ in range(int(timeout * 10)):
        if temporal_server.port_open("127.0.0.1", port):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the codec endpoint did not listen on {port}")
