"""Attachments: files given with the goal reach the model as image, document and text
blocks in the shapes the real APIs check (the fakes refuse any other), while history holds
only references; the bytes are in the object store, sealed when payload keys are set.
From the command line and the API, with one-line refusals."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from activities.transcript import open_objects
from infra.errors import BadRequest
from infra.keyring import new_key, parse_keys
from sessions import start_input
from tests.conftest import Harness, answer, history_text
from tests.support import files
from tests.test_agents import cli
from tests.test_encryption import at_rest, client_with, worker_for
from tests.test_openai_provider import ChatHarness
from workflows.agent import AgentWorkflow
from workflows.contract import SessionStatus

pytest_plugins = ["tests.test_openai_provider"]  # the `chat` harness and its fake


@pytest.fixture(autouse=True)
def no_agents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "agents.toml"
    path.write_text("")
    monkeypatch.setenv("AGENT_DEFINITIONS", str(path))
    return path


def new(name: str, data: bytes, media_type: str | None = None) -> start_input.NewAttachment:
    return start_input.NewAttachment(name=name, data=data, media_type=media_type)


async def run_resolved(harness: Harness, turns: list[dict[str, Any]], attachments: list[Any], **fields: Any):
    session_id = f"test-{uuid.uuid4().hex[:10]}"
    harness.script(session_id, turns)
    session_input = start_input.resolve(
        goal="describe these", agent=None, limits={}, fields={"tools": [], **fields}, attachments=attachments
    )
    handle = await harness.client.start_workflow(
        AgentWorkflow.run, session_input, id=session_id, task_queue=harness.task_queue
    )
    status: SessionStatus = await asyncio.wait_for(handle.result(), timeout=60)
    return status, handle, session_input


async def test_images_a_pdf_and_text_reach_the_model_and_history_holds_references(harness: Harness):
    image, scan, notes = files.png(150, 100), files.pdf(2), b"line one\nline two"
    status, handle, session_input = await run_resolved(
        harness, [answer("A red square, a two-page PDF and two lines.")],
        [new("square.png", image, "image/png"), new("scan.pdf", scan), new("notes.txt", notes)],
    )  # fmt: skip
    assert status.status == "completed", status.error
    [request] = harness.requests(status.session_id)
    first = request["body"]["messages"][0]
    assert first["role"] == "user"
    blocks = [{k: v for k, v in b.items() if k != "cache_control"} for b in first["content"]]
    assert blocks[0] == {
        "type": "image", "source": {"type": "base64", "media_type": "image/png", "data": base64.b64encode(image).decode()},
    }  # fmt: skip
    assert blocks[1] == {
        "type": "document", "title": "scan.pdf",
        "source": {"type": "base64", "media_type": "application/pdf", "data": base64.b64encode(scan).decode()},
    }  # fmt: skip
    assert blocks[2] == {"type": "text", "text": "[attached file notes.txt]\nline one\nline two"}
    assert blocks[3] == {"type": "text", "text": "describe these"}

    recorded = [a.model_dump(exclude_none=True) for a in session_input.attachments]
    assert [(a["name"], a["media_type"], a["size"]) for a in recorded] == [
        ("square.png", "image/png", len(image)), ("scan.pdf", "application/pdf", len(scan)),
        ("notes.txt", "text/plain", len(notes)),
    ]  # fmt: skip
    assert recorded[0]["width"] == 150 and recorded[1]["pages"] == 2
    text = history_text(await handle.fetch_history())
    assert base64.b64encode(image).decode() not in text and "line two" not in text
    assert recorded[0]["ref"] in text  # history names them
    history = await handle.query(AgentWorkflow.history)
    assert history.messages[0].content[0].model_dump()["source"]["type"] == "stored"


async def test_the_fake_refuses_what_the_api_refuses(harness: Harness):
    """The shapes above are checked: a block the API would refuse is refused here too."""
    session_id = f"test-{uuid.uuid4().hex[:10]}"
    harness.script(session_id, [answer("never")])
    bad = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": base64.b64encode(files.jpeg()).decode()}}  # fmt: skip
    # The workflow only sends stored blocks: the fake is called as the real API would be.
    async with httpx.AsyncClient(base_url=harness.fake_model.url) as http:
        body = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": [bad]}]}
        answer_ = await http.post("/v1/messages", json=body, headers={"x-agent-session": session_id})
        assert answer_.status_code == 400
        assert "does not match the provided media type image/png" in answer_.json()["error"]["message"]
        stored = {"type": "image", "source": {"type": "stored", "ref": "x"}}
        body["messages"][0]["content"] = [stored]
        answer_ = await http.post("/v1/messages", json=body, headers={"x-agent-session": session_id})
        assert "Input tag 'stored'" in answer_.json()["error"]["message"]
    assert harness.fake_model.script.used.get(session_id, 0) == 0  # refusals use no turn


def test_refusals_at_start_are_one_line():
    with pytest.raises(BadRequest, match=r"^attachment tool.exe: unknown type; attach PNG"):
        start_input.resolve(
            goal="g", agent=None, limits={}, fields={}, attachments=[new("tool.exe", b"MZ\x90\x00")]
        )
    with pytest.raises(BadRequest, match=r"cannot read PDF attachments \(scan.pdf\): the OpenAI-compatible"):
        start_input.resolve(goal="g", agent=None, limits={}, fields={"model": "openai:gpt-test"},
                            attachments=[new("scan.pdf", files.pdf())])  # fmt: skip


async def test_an_openai_model_gets_images_as_data_urls(chat: ChatHarness):
    image = files.gif(10, 20)
    status, _, _ = await run_resolved(chat, [answer("a GIF")], [new("a.gif", image)], model="openai:gpt-test")
    assert status.status == "completed", status.error
    [request] = chat.requests(status.session_id)
    [user] = [m for m in request["body"]["messages"] if m["role"] == "user"]
    assert user["content"] == [
        {
            "type": "image_url",
            "image_url": {"url": "data:image/gif;base64," + base64.b64encode(image).decode()},
        },
        {"type": "text", "text": "describe these"},
    ]


async def test_the_bytes_are_sealed_when_payload_keys_are_set(
    dev_server, fake_model, data_dir: Path, monkeypatch: pytest.MonkeyPatch
):
    """With keys, the file is encrypted in the store, and a worker with the keys still sends it."""
    keys = f"k1:{new_key()}"
    client = await client_with(dev_server, monkeypatch, keys)
    marker = f"marker-{uuid.uuid4().hex}"
    queue = session_id = f"enc-{uuid.uuid4().hex[:8]}"
    fake_model.script.set(session_id, [answer("read")])
    session_input = start_input.resolve(
        goal="read it",
        agent=None,
        limits={},
        fields={"tools": []},
        attachments=[new("secret.txt", marker.encode())],
    )
    async with worker_for(client, fake_model, queue):
        handle = await client.start_workflow(
            AgentWorkflow.run, session_input, id=session_id, task_queue=queue
        )
        status: SessionStatus = await asyncio.wait_for(handle.result(), 60)
    assert status.status == "completed", status.error
    [request] = [r for r in fake_model.script.requests if r["session"] == session_id]
    assert marker in request["body"]["messages"][0]["content"][0]["text"]
    ref = session_input.attachments[0].ref
    raw = (data_dir / "transcripts" / "attachments" / ref[:2] / ref).read_bytes()
    assert raw.startswith(b"AGK1") and marker.encode() not in raw
    assert marker.encode() not in at_rest(dev_server, data_dir)
    read = await open_objects(None, parse_keys(keys)).get(f"attachments/{ref[:2]}/{ref}")
    assert read == marker.encode()


async def test_the_command_line_attaches_files_and_refuses_unknown_ones(
    harness: Harness, tmp_path: Path, no_agents: Path
):
    (tmp_path / "chart.png").write_bytes(files.png())
    (tmp_path / "blob.bin").write_bytes(b"\x00\x01\x02")
    session = f"test-{uuid.uuid4().hex[:10]}"
    harness.script(session, [answer("a chart")])
    code, _, err = await cli(harness, "start", "what is this", "--tools", "get_time", "--attach", str(tmp_path / "chart.png"),
                             "--session", session, "--wait", definitions=no_agents)  # fmt: skip
    assert code == 0, err
    [request] = harness.requests(session)
    assert request["body"]["messages"][0]["content"][0]["source"]["media_type"] == "image/png"
    code, out, err = await cli(
        harness, "start", "x", "--attach", str(tmp_path / "blob.bin"), definitions=no_agents
    )
    assert code == 1 and not out and len(err.strip().splitlines()) == 1
    assert "attachment blob.bin: unknown type" in err
    code, _, err = await cli(
        harness, "start", "x", "--attach", str(tmp_path / "none.png"), definitions=no_agents
    )
    assert code == 1 and "cannot read the attachment" in err


async def test_the_api_takes_attachments_in_the_start(
    client: Client, dev_server, fake_model, data_dir: Path, tmp_path: Path
):
    from tests.support.api import serve_api, wait_for

    pdf = files.pdf(1) + b"%" * (6 * 1024 * 1024)  # 8 MB as base64: over the 1 MB of other bodies
    async with (
        serve_api(client, dev_server.address, fake_model, data_dir, tmp_path) as api,
        api.client("alice") as alice,
    ):
        session = f"api-{uuid.uuid4().hex[:10]}"
        fake_model.script.set(session, [answer("read it")])
        body = {"goal": "read this", "session_id": session,
                "attachments": [{"name": "big.pdf", "media_type": "application/pdf", "data": base64.b64encode(pdf).decode()}]}  # fmt: skip
        started = await alice.post("/v1/sessions", json=body)
        assert started.status_code == 201, started.text

        async def done() -> dict[str, Any] | None:
            found = (await alice.get(f"/v1/sessions/{session}")).json()
            return found if found["status"] in ("completed", "stopped", "failed") else None

        ended = await wait_for(done, what="the session to end")
        assert ended["status"] == "completed", ended
        [request] = [r for r in fake_model.script.requests if r["session"] == session]
        assert base64.b64decode(request["body"]["messages"][0]["content"][0]["source"]["data"]) == pdf

        for attachment, message in [
            ({"name": "a.png", "media_type": "image/png", "data": "not base64!"}, "attachment a.png: data is not valid base64"),
            ({"name": "a.png", "media_type": "image/png", "data": base64.b64encode(b"GIF89a\x01\x00\x01\x00").decode()},
             "attachment a.png: declared image/png, but its bytes are image/gif"),
        ]:  # fmt: skip
            refused = await alice.post("/v1/sessions", json={"goal": "g", "attachments": [attachment]})
            assert refused.status_code == 422 and refused.json()["error"]["message"] == message, refused.text
        json.dumps(body)  # the body was JSON all along
