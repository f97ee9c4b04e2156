"""The sessions as an A2A agent, driven by the `a2a-sdk` client against a real `python
api.py`: the public card, sends (blocking and not), a tool call waiting for approval as
input-required and approved by a data part with an edited input, the next message of the
chat as the next task, streaming (status updates and the text as artifact chunks),
cancel and get, a 0.3 client on the same endpoint, a task read again after the API
restarted, and a user who reaches only their own tasks."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.helpers import get_artifact_text, get_data_parts
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import InvalidParamsError, UnsupportedOperationError
from google.protobuf import struct_pb2
from google.protobuf.json_format import ParseDict
from temporalio.client import Client as TemporalClient
from temporalio.service import RPCError

from devservers.fakemodel import FakeModelServer
from sessions import control
from tests.conftest import answer, tool_use
from tests.support.api import TOKENS, WORKER_AGENT, ApiProcess, module_api, wait_for
from workflows.typed_output import FINAL_ANSWER

EMAIL = {"to": "team@example.com", "subject": "hi", "body": "x"}
EDITED = {**EMAIL, "to": "boss@example.com"}
pytestmark = pytest.mark.xdist_group("a2a-api")


api = module_api("a2a-api")


@asynccontextmanager
async def agent(
    api: ApiProcess, user: str, *, streaming: bool = False, version: str = "1.0"
) -> AsyncIterator[Client]:
    """An A2A client for `user`, from the agent's card, speaking `version` of the protocol."""
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKENS[user]}"}, timeout=90) as http:
        # A 1.0 client asks for the card it reads; a 0.3 client names no version.
        asked = {"headers": {"A2A-Version": version}} if version != "0.3" else None
        card = await A2ACardResolver(http, api.url).get_agent_card(http_kwargs=asked)
        keep = [i for i in card.supported_interfaces if i.protocol_version == version]
        del card.supported_interfaces[:]
        card.supported_interfaces.extend(keep)
        client = ClientFactory(ClientConfig(streaming=streaming, httpx_client=http)).create(card)
        try:
            yield client
        finally:
            await client.close()


def new_id() -> str:
    return f"a2a-{uuid.uuid4().hex[:10]}"


def message(
    *, text: str | None = None, data: dict[str, Any] | None = None, context_id: str = "", task_id: str = ""
) -> Message:
    parts = [Part(text=text)] if text is not None else []
    if data is not None:
        parts.append(Part(data=ParseDict(data, struct_pb2.Value())))
    return Message(
        message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=parts, context_id=context_id, task_id=task_id
    )


async def send(client: Client, sent: Message, *, immediately: bool = False) -> Task:
    request = SendMessageRequest(
        message=sent, configuration=SendMessageConfiguration(return_immediately=immediately)
    )
    responses: list[StreamResponse] = [r async for r in client.send_message(request)]
    assert len(responses) == 1 and responses[0].HasField("task"), responses
    return responses[0].task


def pending(task: Task) -> list[dict[str, Any]]:
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED, task
    [data] = get_data_parts(task.status.message.parts)
    return data["pending_approvals"]


def answer_of(task: Task) -> str:
    [artifact] = task.artifacts
    return get_artifact_text(artifact)


async def test_the_card_is_public_and_the_endpoint_needs_a_token(api: ApiProcess):
    async with httpx.AsyncClient() as http:
        card = (
            await http.get(f"{api.url}/.well-known/agent-card.json", headers={"A2A-Version": "1.0"})
        ).json()
        for headers in ({}, {"Authorization": "Bearer wrong-token-000"}, {"Cookie": "agent_session=x"}):
            refused = await http.post(
                f"{api.url}/a2a", headers=headers, json={"jsonrpc": "2.0", "id": 1, "method": "GetTask"}
            )
            assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer", (
                refused.text
            )
    assert {s["id"] for s in card["skills"]} == {"assistant", "researcher", "note-keeper", WORKER_AGENT}
    assert card["capabilities"]["streaming"] is True
    assert card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == "bearer"
    assert {(i["url"], i["protocolVersion"]) for i in card["supportedInterfaces"]} == {
        (f"{api.url}/a2a", "1.0"),
        (f"{api.url}/a2a", "0.3"),
    }


async def test_each_protocol_version_gets_the_card_it_defines(api: ApiProcess):
    """A2A 1.0 (section 8, AgentCard; the A2A-Version header, absent meaning 0.3): the 1.0
    card has its interfaces in `supportedInterfaces` and each security scheme as one
    member (`httpAuthSecurityScheme`); the 0.3 card has `url`, `protocolVersion` and
    `preferredTransport`, and each scheme as `{type, scheme}`. Neither carries the other's
    keys; both come from one definition."""
    async with httpx.AsyncClient() as http:
        cards = {
            asked: await http.get(f"{api.url}/.well-known/agent-card.json", headers=headers)
            for asked, headers in [("1.0", {"A2A-Version": "1.0"}), ("1.0.0", {"A2A-Version": "1.0.0"}),
                                   ("0.3", {"A2A-Version": "0.3"}), ("none", {})]
        }  # fmt: skip
    modern, legacy = cards["1.0"].json(), cards["0.3"].json()
    bearer = {"scheme": "bearer", "description": "a token of the API's users (AGENT_API_USERS)"}
    assert modern["securitySchemes"] == {"bearer": {"httpAuthSecurityScheme": bearer}}
    assert not {"url", "protocolVersion", "preferredTransport", "additionalInterfaces", "security"} & set(
        modern
    )
    assert modern["securityRequirements"] == [{"schemes": {"bearer": {}}}]
    assert legacy["securitySchemes"] == {"bearer": {"type": "http", **bearer}}
    assert legacy["security"] == [{"bearer": []}]
    assert (legacy["url"], legacy["protocolVersion"], legacy["preferredTransport"]) == (
        f"{api.url}/a2a",
        "0.3",
        "JSONRPC",
    )
    assert not {"supportedInterfaces", "securityRequirements"} & set(legacy)
    for key in ("name", "description", "version", "skills", "defaultInputModes", "defaultOutputModes"):
        assert json.dumps(modern[key], sort_keys=True) == json.dumps(legacy[key], sort_keys=True), key
    assert modern["capabilities"]["streaming"] is legacy["capabilities"]["streaming"] is True
    assert cards["1.0.0"].json() == modern and cards["none"].json() == legacy
    async with httpx.AsyncClient() as http:  # the version as a request parameter, as the spec allows
        asked = await http.get(f"{api.url}/.well-known/agent-card.json", params={"A2A-Version": "1.0"})
    assert asked.json() == modern
    assert all(c.status_code == 200 and "A2A-Version" in c.headers["vary"] for c in cards.values())


async def test_get_task_refuses_a_negative_history_length(api: ApiProcess, fake_model: FakeModelServer):
    """GetTask's `historyLength` (A2A 1.0, 3.1.3): a negative value is invalid params, -32602."""
    session_id = new_id()
    fake_model.script.set(session_id, [answer("Hi.")])
    async with agent(api, "alice") as alice:
        task = await send(alice, message(text="hi", context_id=session_id))
        assert (await alice.get_task(GetTaskRequest(id=task.id, history_length=0))).id == task.id
        with pytest.raises(InvalidParamsError, match="historyLength"):
            await alice.get_task(GetTaskRequest(id=task.id, history_length=-1))
        with pytest.raises(InvalidParamsError, match="historyLength"):
            await alice.send_message(
                SendMessageRequest(
                    message=message(text="again", context_id=session_id),
                    configuration=SendMessageConfiguration(history_length=-1),
                )
            ).__anext__()
    answered = await rpc(api, "GetTask", {"id": task.id, "historyLength": -1})
    assert answered["error"]["code"] == -32602, answered


async def test_a_message_to_a_task_that_has_ended_is_an_unsupported_operation(
    api: ApiProcess, fake_model: FakeModelServer
):
    """A2A 1.0 (3.1.1, 3.3.4): a task in a terminal state takes no more messages; sending
    one answers UnsupportedOperationError, -32004. Cancelled or completed alike, and a chat's
    earlier turn, which completed, too."""
    chat, ended = new_id(), new_id()
    fake_model.script.set(chat, [answer("One."), answer("Two.")])
    fake_model.script.set(ended, [tool_use("wait_for_cancel", {"seconds": 60}, id="w1")])
    async with agent(api, "alice") as alice:
        first = await send(alice, message(text="one", context_id=chat))
        second = await send(alice, message(text="two", context_id=chat))
        assert (first.status.state, second.status.state) == (TaskState.TASK_STATE_COMPLETED,) * 2
        cancelled = await send(alice, message(text="wait", context_id=ended), immediately=True)
        # A cancel answers once the task has ended, even one waiting for a decision.
        ended_task = await alice.cancel_task(CancelTaskRequest(id=cancelled.id))
        assert ended_task.status.state == TaskState.TASK_STATE_CANCELED, ended_task.status
        for task in (first, second, cancelled):
            for sent in (
                message(text="more", task_id=task.id),
                message(data={"approve": "w1"}, task_id=task.id),
            ):
                with pytest.raises(UnsupportedOperationError, match="has ended"):
                    await send(alice, sent)
    answered = await rpc(api, "SendMessage", {"message": {
        "messageId": uuid.uuid4().hex, "role": "ROLE_USER", "taskId": first.id, "parts": [{"text": "more"}],
    }})  # fmt: skip
    assert answered["error"]["code"] == -32004, answered


async def rpc(api: ApiProcess, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """One JSON-RPC request to /a2a as alice at A2A 1.0, written by hand."""
    async with httpx.AsyncClient(timeout=90) as http:
        answered = await http.post(
            f"{api.url}/a2a",
            headers={"Authorization": f"Bearer {TOKENS['alice']}", "A2A-Version": "1.0"},
            json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
        )
    return answered.json()


async def test_a_chat_with_an_approval_survives_a_restart_and_stays_its_users(
    api: ApiProcess, client: TemporalClient, fake_model: FakeModelServer
):
    session_id = new_id()
    fake_model.script.set(session_id, [
        tool_use("send_email", EMAIL, id="e1", text="Emailing the team."), answer("Sent it."), answer("Nothing else."),
    ])  # fmt: skip
    async with agent(api, "alice") as alice:
        first = await send(alice, message(text="email the team", context_id=session_id))
        assert first.id == f"{session_id}.turn-1" and first.context_id == session_id
        [call] = pending(first)
        assert call["tool_use_id"] == "e1" and call["name"] == "send_email" and call["input"] == EMAIL
    api.restart()  # the task is the session's: nothing of it lived in the old process
    async with agent(api, "alice") as alice, agent(api, "bob") as bob:
        assert pending(await alice.get_task(GetTaskRequest(id=first.id)))[0]["tool_use_id"] == "e1"
        with pytest.raises(Exception, match="no task"):
            await bob.get_task(GetTaskRequest(id=first.id))
        with pytest.raises(Exception, match="no task"):
            await send(bob, message(data={"approve": "e1"}, task_id=first.id, context_id=session_id))
        with pytest.raises(Exception, match="no task"):
            await bob.cancel_task(CancelTaskRequest(id=first.id))
        with pytest.raises(Exception, match="a decision"):
            await send(alice, message(text="yes please", task_id=first.id, context_id=session_id))

        done = await send(
            alice, message(data={"approve": "e1", "input": EDITED}, task_id=first.id, context_id=session_id)
        )
        assert done.id == first.id and done.status.state == TaskState.TASK_STATE_COMPLETED, done
        assert answer_of(done) == "Sent it."
        history = control.history_document(await control.history(client, session_id))
        [sent] = [c for c in history["tool_calls"] if c["tool_use_id"] == "e1"]
        assert sent["approved_input"] == EDITED and sent["decided_by"] == "alice", sent

        second = await send(alice, message(text="anything else?", context_id=session_id))
        assert second.id == f"{session_id}.turn-2" and second.status.state == TaskState.TASK_STATE_COMPLETED
        assert answer_of(second) == "Nothing else."
        again = await alice.get_task(GetTaskRequest(id=first.id))
        assert again.status.state == TaskState.TASK_STATE_COMPLETED and answer_of(again) == "Sent it."
        assert [p.text for m in again.history for p in m.parts] == ["email the team"]
        with pytest.raises(Exception, match="has ended"):
            await alice.cancel_task(CancelTaskRequest(id=first.id))
        listed = await alice.list_tasks(ListTasksRequest(context_id=session_id, include_artifacts=True))
        assert [(t.id, answer_of(t)) for t in listed.tasks] == [
            (first.id, "Sent it."),
            (second.id, "Nothing else."),
        ]
        # Another user's context reads as one no session has: an empty list (A2A 1.0).
        theirs = await bob.list_tasks(ListTasksRequest(context_id=session_id))
        assert list(theirs.tasks) == [] and theirs.total_size == 0 and not theirs.next_page_token


async def test_a_send_that_returns_at_once_then_get_and_cancel(api: ApiProcess, fake_model: FakeModelServer):
    session_id = new_id()
    fake_model.script.set(session_id, [tool_use("wait_for_cancel", {"seconds": 60}, id="w1")])
    async with agent(api, "alice") as alice, agent(api, "alice", streaming=True) as watching:
        task = await send(alice, message(text="wait a minute", context_id=session_id), immediately=True)
        assert task.status.state == TaskState.TASK_STATE_WORKING, task
        assert (await alice.get_task(GetTaskRequest(id=task.id))).status.state == TaskState.TASK_STATE_WORKING
        subscription = watching.subscribe(SubscribeToTaskRequest(id=task.id))
        first = await anext(subscription)
        assert first.task.status.state == TaskState.TASK_STATE_WORKING
        cancelled = await alice.cancel_task(CancelTaskRequest(id=task.id))
        assert cancelled.status.state == TaskState.TASK_STATE_CANCELED, cancelled
        assert (
            await alice.get_task(GetTaskRequest(id=task.id))
        ).status.state == TaskState.TASK_STATE_CANCELED
        rest = [e async for e in subscription]
        assert rest[-1].status_update.status.state == TaskState.TASK_STATE_CANCELED, rest


async def test_streaming_sends_status_updates_and_the_text_as_chunks(
    api: ApiProcess, client: TemporalClient, fake_model: FakeModelServer
):
    session_id = new_id()
    # The text takes 6 s, so a follower slowed by a loaded machine still arrives while the
    # model writes it (one CI run's follower missed a 1.2 s turn).
    text = "one two three four five six seven eight nine ten eleven twelve"
    fake_model.script.set(session_id, [answer(text, pace=0.5)])
    async with agent(api, "alice", streaming=True) as alice:
        with pytest.raises(Exception, match="no agent 'nobody'"):
            await anext(
                alice.send_message(
                    SendMessageRequest(message=message(text="count"), metadata={"agent": "nobody"})
                )
            )
        sent = message(text="count", context_id=session_id)
        sent.metadata.update({"agent": "researcher"})
        events = [e async for e in alice.send_message(SendMessageRequest(message=sent))]
    assert (await control.status(client, session_id)).agent == "researcher"
    assert events[0].HasField("task") and events[0].task.id == f"{session_id}.turn-1"
    chunks = [
        e.artifact_update
        for e in events
        if e.HasField("artifact_update") and not e.artifact_update.last_chunk
    ]
    assert len(chunks) >= 3 and all(c.append for c in chunks[1:]), chunks
    assert "".join(get_artifact_text(c.artifact) for c in chunks).strip() == text
    [final] = [
        e.artifact_update for e in events if e.HasField("artifact_update") and e.artifact_update.last_chunk
    ]
    assert get_artifact_text(final.artifact) == text
    assert events[-1].HasField("status_update")
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED


async def test_a_0_3_client_sends_without_blocking_approves_and_streams(
    api: ApiProcess, fake_model: FakeModelServer
):
    session_id = new_id()
    fake_model.script.set(session_id, [tool_use("send_email", EMAIL, id="e1"), answer("Sent.")])
    async with agent(api, "bob", version="0.3") as bob:
        started = await send(bob, message(text="email", context_id=session_id), immediately=True)
        assert started.id == f"{session_id}.turn-1"
        assert started.status.state in (TaskState.TASK_STATE_WORKING, TaskState.TASK_STATE_INPUT_REQUIRED)

        async def waiting_for_approval() -> Task | None:
            found = await bob.get_task(GetTaskRequest(id=started.id))
            return found if found.status.state != TaskState.TASK_STATE_WORKING else None

        waiting = await wait_for(waiting_for_approval, 30, "the task to need input")
        assert pending(waiting)[0]["tool_use_id"] == "e1"
        done = await send(
            bob,
            message(data={"deny": "e1", "reason": "not today"}, task_id=started.id, context_id=session_id),
        )
        assert done.status.state == TaskState.TASK_STATE_COMPLETED and answer_of(done) == "Sent.", done
    streamed = new_id()
    fake_model.script.set(streamed, [answer("Hi.")])
    async with agent(api, "bob", streaming=True, version="0.3") as bob:
        events = [
            e
            async for e in bob.send_message(
                SendMessageRequest(message=message(text="hi", context_id=streamed))
            )
        ]
    assert events[0].task.id == f"{streamed}.turn-1"
    last = events[-1]  # a status update; or the task itself, if it was done before the stream began
    final = last.status_update.status if last.HasField("status_update") else last.task.status
    assert final.state == TaskState.TASK_STATE_COMPLETED, events


REPORT = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
NOTES = b"line one\nline two"


def with_file(sent: Message, part: Part) -> Message:
    sent.parts.append(part)
    return sent


async def test_a_start_with_a_file_and_an_output_schema_answers_the_parsed_output(
    api: ApiProcess, client: TemporalClient, fake_model: FakeModelServer
):
    """A file part is the session's attachment, metadata carries POST /v1/sessions's
    choices, and the typed answer's output is a data part of the task's artifact."""
    session_id = new_id()
    fake_model.script.set(session_id, [tool_use(FINAL_ANSWER, {"city": "Lima"}, id="f1")])
    sent = with_file(
        message(text="which city?", context_id=session_id),
        Part(raw=NOTES, filename="notes.txt", media_type="text/plain"),
    )
    sent.metadata.update({"output_schema": REPORT, "max_steps": 3, "temperature": 0.5})
    async with agent(api, "alice") as alice:
        task = await send(alice, sent)
        assert task.status.state == TaskState.TASK_STATE_COMPLETED, task
        [artifact] = task.artifacts
        assert get_data_parts(artifact.parts) == [{"city": "Lima"}]
        assert json.loads(get_artifact_text(artifact)) == {"city": "Lima"}
        again = await alice.get_task(GetTaskRequest(id=task.id))
        assert get_data_parts(again.artifacts[0].parts) == [{"city": "Lima"}]
    status = await control.status(client, session_id)
    assert status.output == {"city": "Lima"} and status.limits.max_steps == 3 and not status.chat
    [request] = [r["body"] for r in fake_model.script.requests if r["session"] == session_id]
    assert request["temperature"] == 0.5
    assert {"type": "text", "text": "[attached file notes.txt]\nline one\nline two"} in [
        {k: v for k, v in b.items() if k != "cache_control"} for b in request["messages"][0]["content"]
    ]


@pytest.mark.parametrize(
    ("metadata", "file", "says"),
    [
        ({"output_schema": "not an object"}, None, "output_schema"),
        ({"fallback_models": ["nowhere:model-x"]}, None, "nowhere"),
        ({"max_steps": 0}, None, "max_steps"),
        ({}, Part(url="https://example.com/a.txt", filename="a.txt", media_type="text/plain"), "not a URL"),
        ({}, Part(raw=b"\x89PNG not really", filename="a.png", media_type="image/png"), "a.png"),
    ],
)  # fmt: skip
async def test_a_start_with_a_bad_choice_or_file_is_refused_in_one_line(
    metadata: dict[str, Any], file: Part | None, says: str, api: ApiProcess, client: TemporalClient
):
    session_id = new_id()
    sent = message(text="g", context_id=session_id)
    if file is not None:
        with_file(sent, file)
    sent.metadata.update(metadata)
    async with agent(api, "alice") as alice:
        with pytest.raises(Exception, match=says) as refused:
            await send(alice, sent)
    assert "\n" not in str(refused.value), refused.value
    with pytest.raises(RPCError):  # nothing started
        await client.get_workflow_handle(session_id).describe()


async def test_a_chats_next_message_takes_no_file(api: ApiProcess, fake_model: FakeModelServer):
    session_id = new_id()
    fake_model.script.set(session_id, [answer("hello")])
    async with agent(api, "alice") as alice:
        first = await send(alice, message(text="hi", context_id=session_id))
        assert first.status.state == TaskState.TASK_STATE_COMPLETED, first
        sent = with_file(
            message(text="and this", context_id=session_id),
            Part(raw=NOTES, filename="notes.txt", media_type="text/plain"),
        )
        with pytest.raises(Exception, match="text only"):
            await send(alice, sent)


def _requests(fake_model: FakeModelServer, session_id: str) -> list[dict[str, Any]]:
    return [r for r in fake_model.script.requests if r["session"] == session_id]


def _texts(request: dict[str, Any]) -> list[str]:
    content = request["body"]["messages"][-1]["content"]
    return [content] if isinstance(content, str) else [b["text"] for b in content if b["type"] == "text"]


async def _ended(client: Client, task_id: str) -> Task:
    async def check() -> Task | None:
        found = await client.get_task(GetTaskRequest(id=task_id))
        return found if found.status.state not in (TaskState.TASK_STATE_WORKING,) else None

    return await wait_for(check, 60, f"task {task_id} to end")


async def test_a_message_to_a_working_context_steers_it_or_interrupts_it(
    api: ApiProcess, fake_model: FakeModelServer
):
    """A session that is not a chat takes a message to its context as a steer, for its task;
    a chat takes `metadata.mode` ("interrupt" here: the model's stream is cut short)."""
    working = new_id()
    fake_model.script.set(
        working, [tool_use("slow_upsert", {"key": "k", "seconds": 2}, id="s1"), answer("fini")]
    )
    async with httpx.AsyncClient(
        base_url=api.url, headers={"Authorization": f"Bearer {TOKENS['alice']}"}, timeout=30
    ) as http:
        started = await http.post("/v1/sessions", json={"goal": "write it", "session_id": working})
        assert started.status_code == 201, started.text
    async with agent(api, "alice") as alice, agent(api, "bob") as bob:
        await wait_for(lambda: _async(_requests(fake_model, working)), 30, "the first model call")
        with pytest.raises(Exception, match=r"no task|already exists"):  # not hers to steer
            await send(bob, message(text="in German", context_id=working), immediately=True)
        steered = await send(alice, message(text="in French", context_id=working), immediately=True)
        assert steered.id == f"{working}.turn-1", steered
        done = await _ended(alice, steered.id)
        assert done.status.state == TaskState.TASK_STATE_COMPLETED and answer_of(done) == "fini", done
        assert _texts(_requests(fake_model, working)[1]) == ["in French"]

        chat = new_id()
        words = " ".join(f"word{i}" for i in range(600))
        fake_model.script.set(chat, [answer(words, pace=0.05), answer("short")])
        first = await send(alice, message(text="write a lot", context_id=chat), immediately=True)
        [request] = await wait_for(lambda: _async(_requests(fake_model, chat)), 30, "the chat's model call")
        bad = message(text="stop", context_id=chat)
        bad.metadata.update({"mode": "now"})
        with pytest.raises(InvalidParamsError, match="mode"):
            await send(alice, bad, immediately=True)
        cut = message(text="one word", context_id=chat)
        cut.metadata.update({"mode": "interrupt"})
        interrupted = await send(alice, cut, immediately=True)
        assert interrupted.id == first.id == f"{chat}.turn-1", interrupted
        await wait_for(lambda: _async(request.get("closed")), 15, "the model's connection closed")
        done = await _ended(alice, first.id)
        assert answer_of(done) == "short" and done.status.state == TaskState.TASK_STATE_COMPLETED, done
        assert _texts(_requests(fake_model, chat)[1]) == ["write a lot", "one word"]


async def _async(value: Any) -> Any:
    return value


async def test_a_budget_that_asks_is_input_required_and_a_reply_raises_or_declines(
    api: ApiProcess, client: TemporalClient, fake_model: FakeModelServer
):
    raised, declined = new_id(), new_id()
    for session_id in (raised, declined):
        fake_model.script.set(session_id, [tool_use("get_time", id="t1"), answer("It is noon.")])
    async with agent(api, "alice") as alice, agent(api, "bob") as bob:
        tasks: dict[str, Task] = {}
        for session_id in (raised, declined):
            sent = message(text="what time is it?", context_id=session_id)
            sent.metadata.update({"max_steps": 1, "on_limit": "ask"})
            tasks[session_id] = task = await send(alice, sent)
            assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED, task
            [data] = get_data_parts(task.status.message.parts)
            assert {k: data["limit_reached"][k] for k in ("name", "limit", "used")} == {
                "name": "max_steps", "limit": 1, "used": 1,
            }, data  # fmt: skip
            assert '{"raise"' in task.status.message.parts[0].text
        waiting = await alice.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_INPUT_REQUIRED))
        assert {raised, declined} <= {t.context_id for t in waiting.tasks}

        task = tasks[raised]
        with pytest.raises(Exception, match="no task"):
            await send(bob, message(data={"raise": {"name": "max_steps", "value": 3}}, task_id=task.id))
        for bad, says in [
            ({"raise": {"name": "max_steps"}}, "a raise is"),
            ({"raise": {"name": "max_steps", "value": True}}, "a raise is"),
            ({"raise": {"name": "patience", "value": 3}}, "name"),
            ({"raise": {"name": "max_steps", "value": 1}}, "above"),
            ({"decline": "yes"}, "a decline is"),
        ]:
            with pytest.raises(Exception, match=says) as refused:
                await send(alice, message(data=bad, task_id=task.id))
            assert "\n" not in str(refused.value), refused.value
        done = await send(alice, message(data={"raise": {"name": "max_steps", "value": 3}}, task_id=task.id))
        assert done.id == task.id and done.status.state == TaskState.TASK_STATE_COMPLETED, done
        assert answer_of(done) == "It is noon."
        assert (await control.status(client, raised)).limits.max_steps == 3

        task = tasks[declined]
        ended = await send(
            alice, message(data={"decline": True, "reason": "enough"}, task_id=task.id, context_id=declined)
        )
        assert ended.status.state == TaskState.TASK_STATE_FAILED, ended
        assert ended.status.message.parts[0].text == "stopped: max_steps"
        status = await control.status(client, declined)
        assert (status.status, status.stop_reason) == ("stopped", "max_steps")
