"""Extended thinking and model settings: what a start refuses (one line), what reaches the
model's API, and thinking blocks going back exactly as they came, in place, through tool
turns, context fitting, continue-as-new and fork, against fake model APIs that refuse
what the real ones refuse (altered thinking, a tool loop without its turn's thinking,
settings that do not go together). Thinking streams to followers as `thinking_delta`
events, never as answer text."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import anthropic
import pytest
import pytest_asyncio
from temporalio.client import Client

from activities.context import cut_points, fit
from activities.providers.anthropic import adaptive_budget, thinking
from activities.providers.base import ProviderCall
from activities.providers.openai import OpenAIProvider
from activities.providers.openai_format import reasoning_effort
from devservers.fakemodel import FakeChatServer, FakeModelServer
from devservers.fakemodel.server import sign
from infra.errors import BadRequest
from sessions import start_input
from sessions.fork import forked_input
from sessions.pricing import price_for
from tests.conftest import ROOT, Harness, answer
from tests.support.api import ApiProcess, collect_events, serve_api
from tests.test_openai_provider import ChatHarness, chat, fake_chat  # noqa: F401  (fixtures)
from tests.test_watch import cli_env
from workflows.agent import AgentWorkflow
from workflows.contract import Limits, ModelSettings, SessionHistory, SessionInput
from workflows.state import SessionState

THOUGHT = "Let me think about which tool answers this. " * 3


def thinking_turn(
    thought: str = THOUGHT, *, tool: bool = True, text: str = "", **extra: Any
) -> dict[str, Any]:
    turn: dict[str, Any] = {"thinking": thought, "text": text, **extra}
    if tool:
        turn["tool_calls"] = [{"name": "get_time", "input": {}, "id": f"t{uuid.uuid4().hex[:8]}"}]
    return turn


def settings(**fields: Any) -> ModelSettings:
    return ModelSettings(**fields)


async def history_of(harness: Harness, session_id: str) -> SessionHistory:
    return await harness.client.get_workflow_handle(session_id).query("history", result_type=SessionHistory)


# ---- what a start refuses --------------------------------------------------------------


@pytest.fixture
def no_definitions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "agents.toml"
    path.write_text("")
    monkeypatch.setenv("AGENT_DEFINITIONS", str(path))
    return path


REFUSED = [
    ({"thinking_budget": 500}, {}, "thinking_budget must be at least 1024 tokens, not 500"),
    ({"thinking_budget": 4096}, {}, "thinking_budget (4096) must be below max_tokens (4096)"),
    ({"thinking_budget": "adaptive"}, {"max_tokens": 1024}, "thinking needs max_tokens above 1024"),
    ({"thinking_budget": 2048, "temperature": 0.5}, {}, "thinking takes no temperature but 1 (not 0.5)"),
    ({"thinking_budget": 2048, "top_p": 0.9}, {}, "thinking takes top_p from 0.95 to 1, not 0.9"),
    ({"thinking_budget": 2048, "tool_choice": "any"}, {}, "thinking cannot be on with tool_choice 'any'"),
    (
        {"thinking_budget": "adaptive", "tool_choice": "get_time"},
        {},
        "thinking cannot be on with tool_choice",
    ),
    ({"temperature": 0.5, "top_p": 0.9}, {}, "model claude-sonnet-4-6 takes temperature or top_p, not both"),
    ({"temperature": 1.5}, {}, "temperature must be between 0 and 1 for Anthropic's models, not 1.5"),
    ({"top_p": 0.5}, {"model": "claude-opus-4-7"}, "model claude-opus-4-7 takes no temperature or top_p"),
    ({"tool_choice": "send_email"}, {"tools": ["get_time"]}, "tool_choice 'send_email' is not one of"),
    ({"stop_sequences": ["a", "b", "c", "d", "e"]}, {"model": "openai:gpt-test"}, "at most 4 stop sequences"),
]


@pytest.mark.parametrize(("given", "other", "message"), REFUSED, ids=[m for _, _, m in REFUSED])
def test_a_start_refuses_what_the_model_api_would_with_one_line(
    no_definitions: Path, given: dict[str, Any], other: dict[str, Any], message: str
):
    limits = {"max_tokens": other.pop("max_tokens")} if "max_tokens" in other else {}
    with pytest.raises(BadRequest) as refused:
        start_input.resolve(goal="g", agent=None, limits=limits, fields=other, settings=given)
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_what_a_start_allows_is_recorded_and_older_inputs_still_load(no_definitions: Path):
    resolved = start_input.resolve(
        goal="g", agent=None, limits={"max_tokens": 8000}, fields={"model": "claude-haiku-4-5"},
        settings={"thinking_budget": 4000, "top_p": 0.95, "stop_sequences": ["END"], "tool_choice": "none"},
    )  # fmt: skip
    assert resolved.model_settings == ModelSettings(
        thinking_budget=4000, top_p=0.95, stop_sequences=["END"], tool_choice="none"
    )
    # Nothing set: nothing recorded, and a start input of before these fields loads.
    plain = start_input.resolve(goal="g", agent=None, limits={}, fields={}, settings={})
    assert plain.model_settings is None
    older = plain.model_dump(mode="json")
    del older["model_settings"]
    assert SessionInput.model_validate(older).model_settings is None


def test_an_agents_settings_are_its_sessions_and_the_callers_win(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    path = tmp_path / "agents.toml"
    path.write_text(
        '[agents.careful]\nmax_tokens = 8000\nthinking_budget = 3000\nstop_sequences = ["STOP"]\n'
        "[agents.hot]\ntemperature = 0.2\nthinking_budget = 2000\n"
    )
    monkeypatch.setenv("AGENT_DEFINITIONS", str(path))
    resolved = start_input.resolve(
        goal="g", agent="careful", limits={}, fields={}, settings={"thinking_budget": 5000}
    )
    assert resolved.model_settings == ModelSettings(thinking_budget=5000, stop_sequences=["STOP"])
    with pytest.raises(BadRequest, match="thinking takes no temperature but 1"):
        start_input.resolve(goal="g", agent="hot", limits={}, fields={}, settings={})


# ---- the thinking parameter and its OpenAI-compatible mapping ---------------------------


def test_the_thinking_parameter_per_model_family():
    assert thinking(2048, "claude-haiku-4-5", 4096) == {"type": "enabled", "budget_tokens": 2048}
    assert thinking(2048, "claude-sonnet-4-6", 4096) == {"type": "enabled", "budget_tokens": 2048}
    assert thinking("adaptive", "claude-sonnet-4-6", 4096) == {"type": "adaptive"}
    assert thinking(2048, "claude-opus-4-7", 4096) == {"type": "adaptive"}  # takes adaptive only
    assert thinking("adaptive", "claude-haiku-4-5", 4096) == {"type": "enabled", "budget_tokens": 2048}
    assert adaptive_budget(1500) == 1024 and adaptive_budget(64000) == 32000
    assert [reasoning_effort(b) for b in (1024, 4095, 4096, 16383, 16384, "adaptive")] == [
        "low", "low", "medium", "medium", "high", "medium",
    ]  # fmt: skip


# ---- the fake refuses what the real API refuses ------------------------------------------


def test_the_fake_messages_api_refuses_what_the_real_one_refuses(fake_model: FakeModelServer):
    api = anthropic.Anthropic(base_url=fake_model.url, api_key="test-key", max_retries=0)
    session = f"refuse-{uuid.uuid4().hex[:6]}"
    tools = [{"name": "get_time", "description": "the time", "input_schema": {"type": "object"}}]
    thought = {"type": "thinking", "thinking": "hm", "signature": sign("hm")}
    use = {"type": "tool_use", "id": "t1", "name": "get_time", "input": {}}
    loop = [
        {"role": "user", "content": "what time is it?"},
        {"role": "assistant", "content": [thought, use]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "noon"}]},
    ]
    on = {"type": "enabled", "budget_tokens": 1024}

    def refused(**params: Any) -> str:
        body = {"model": "claude-haiku-4-5", "max_tokens": 2048, "messages": loop, "tools": tools, **params}
        with pytest.raises(anthropic.BadRequestError) as err:
            api.messages.create(**body, extra_headers={"x-agent-session": session})
        return str(err.value)

    altered = [loop[0], {"role": "assistant", "content": [{**thought, "thinking": "hmm"}, use]}, loop[2]]
    assert "Invalid `signature` in `thinking` block" in refused(thinking=on, messages=altered)
    without = [loop[0], {"role": "assistant", "content": [use]}, loop[2]]
    assert "must start with a thinking block" in refused(thinking=on, messages=without)
    assert "greater than `thinking.budget_tokens`" in refused(thinking=on, max_tokens=1024)
    assert "Thinking may not be enabled when tool_choice forces" in refused(
        thinking=on, tool_choice={"type": "any"}
    )
    # (This SDK has no keyword for the sampling settings: they go in the body.)
    assert "only be set to 1" in refused(thinking=on, extra_body={"temperature": 0.5})
    assert "cannot both be specified" in refused(extra_body={"temperature": 0.5, "top_p": 0.9})
    assert "deprecated for this model" in refused(model="claude-opus-4-7", extra_body={"temperature": 0.5})
    assert "not among the request's tools" in refused(tool_choice={"type": "tool", "name": "nope"})
    assert "adaptive is not supported" in refused(thinking={"type": "adaptive"})
    assert "enabled is not supported" in refused(thinking=on, model="claude-opus-4-7")
    # What is right passes, and no turn was used by the refusals.
    fake_model.script.set(session, [answer("fine")])
    reply = api.messages.create(
        model="claude-haiku-4-5", max_tokens=2048, messages=loop, tools=tools, thinking=on,  # type: ignore[arg-type]
        extra_headers={"x-agent-session": session},
    )  # fmt: skip
    assert reply.content[0].type == "text"


# ---- context fitting ---------------------------------------------------------------------


def _loop(thinks: list[bool]) -> list[dict[str, Any]]:
    """The goal, then one turn of tool calls: each assistant message thinking or not."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": "goal"}]}]
    for i, thinks_here in enumerate(thinks):
        blocks: list[dict[str, Any]] = (
            [{"type": "thinking", "thinking": "x" * 300, "signature": "s"}] if thinks_here else []
        )
        blocks.append({"type": "tool_use", "id": f"t{i}", "name": "get_time", "input": {}})
        messages.append({"role": "assistant", "content": blocks})
        messages.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": "y" * 300}],
            }
        )
    return messages


def test_fitting_never_keeps_a_tool_call_without_its_turns_thinking():
    messages = _loop([True, False, False, True, False, False, True, False, False])
    # Only the assistant messages that think may start the kept tail (index 1 is the turn's first).
    assert cut_points(messages) == [7, 13]
    fitted = fit(messages, budget=500)
    assert fitted.dropped and fitted.messages[1]["content"][0]["type"] == "thinking"
    # With no thinking in the transcript, every assistant message after the first may.
    plain = _loop([False] * 5)
    assert cut_points(plain) == [3, 5, 7, 9]
    # A person's message opens a new turn: its first assistant message may start the tail.
    chat = [*_loop([True, False]), {"role": "user", "content": [{"type": "text", "text": "more"}]}]
    chat += _loop([False, False])[1:]
    assert cut_points(chat) == [6, 8]


# ---- whole sessions against the fake -----------------------------------------------------


@pytest.mark.parametrize(
    ("model", "budget", "sent"),
    [
        ("claude-haiku-4-5", 2048, {"type": "enabled", "budget_tokens": 2048}),
        ("claude-haiku-4-5", "adaptive", {"type": "enabled", "budget_tokens": 2048}),
        ("claude-sonnet-4-6", "adaptive", {"type": "adaptive"}),
        ("claude-opus-4-7", 2048, {"type": "adaptive"}),
    ],
    ids=["budget", "adaptive-as-budget", "adaptive", "budget-as-adaptive"],
)
async def test_thinking_goes_back_exactly_in_place_through_tool_turns_and_counts_as_output(
    harness: Harness, model: str, budget: int | str, sent: dict[str, Any]
):
    turns = [
        thinking_turn(usage={"output_tokens": 700}),
        thinking_turn("Second thoughts.", redacted_thinking="hidden", usage={"output_tokens": 300}),
        thinking_turn("Now I can answer.", tool=False, text="It is noon.", usage={"output_tokens": 90}),
    ]
    price = price_for("claude-sonnet-4-6")  # one price for every model here: the cost is the point
    assert price is not None
    status = await harness.run(
        turns, model=model, model_settings=settings(thinking_budget=budget), limits={"max_tokens": 4096},
        price=price,
    )  # fmt: skip
    assert status.status == "completed", status.error
    assert status.answer == "It is noon."
    requests = [r["body"] for r in harness.requests(status.session_id)]
    assert [r["thinking"] for r in requests] == [sent] * 3
    history = await history_of(harness, status.session_id)
    # The assistant messages as the API gave them, thinking first, signatures included ...
    replies = [
        m.model_dump(mode="json", exclude_none=True) for m in history.messages if m.role == "assistant"
    ]
    assert replies[0]["content"][0] == {"type": "thinking", "thinking": THOUGHT, "signature": sign(THOUGHT)}
    assert [b["type"] for b in replies[1]["content"]] == ["thinking", "redacted_thinking", "tool_use"]
    # ... and sent back exactly so, in place, in every later request.
    for later, seen in ((requests[1], 1), (requests[2], 2)):
        sent_back = [m for m in later["messages"] if m["role"] == "assistant"]
        assert [_without_cache(m) for m in sent_back] == replies[:seen]
    # Thinking tokens are output tokens: the usage and the cost count them.
    assert status.usage.output_tokens == 700 + 300 + 90
    assert history.trace[0].usage.output_tokens == 700
    assert status.cost_usd == pytest.approx(price.cost(status.usage))
    assert (status.cost_usd or 0) > price.cost(status.usage.model_copy(update={"output_tokens": 0}))


def _without_cache(message: dict[str, Any]) -> dict[str, Any]:
    return {
        **message,
        "content": [{k: v for k, v in b.items() if k != "cache_control"} for b in message["content"]],
    }


async def test_a_tight_context_keeps_each_tool_call_with_its_turns_thinking(harness: Harness):
    # Thinking on the first call of every third step only: a cut anywhere else would keep
    # tool calls without their thinking, which the fake refuses like the API.
    long = "a long line of reasoning. " * 60
    plain = {"tool_calls": [{"name": "get_time", "input": {}}]}
    turns = [thinking_turn(long) if i % 3 == 0 else plain for i in range(9)]
    turns.append(answer("done"))
    status = await harness.run(
        turns, model="claude-haiku-4-5", model_settings=settings(thinking_budget=1024), tools=["get_time"],
        limits={"max_tokens": 1100, "context_tokens": 2600, "max_steps": 20},
    )  # fmt: skip
    assert status.status == "completed", status.error
    history = await history_of(harness, status.session_id)
    assert any(t.context_dropped for t in history.trace), [t.context_dropped for t in history.trace]
    for request in harness.requests(status.session_id)[1:]:
        first = next(m for m in request["body"]["messages"] if m["role"] == "assistant")
        assert first["content"][0]["type"] == "thinking"


async def test_continue_as_new_and_fork_send_the_thinking_back_as_it_came(harness: Harness):
    turns = [
        thinking_turn(),
        thinking_turn("More.", tool=True),
        thinking_turn("Done.", tool=False, text="noon"),
    ]
    status = await harness.run(
        turns, model_settings=settings(thinking_budget=2048),
        limits={"continue_as_new_after_steps": 1, "max_tokens": 4096},
    )  # fmt: skip
    assert status.status == "completed" and status.runs >= 3, (status.error, status.runs)
    # A fork after step 2 (a tool call with its result) sends the transcript whole: the
    # thinking of step 1 and 2, as they came, from the forked state.
    source = harness.client.get_workflow_handle(status.session_id)
    state = await source.query(AgentWorkflow.state)
    source_input = SessionInput(goal="do the thing", model_settings=settings(thinking_budget=2048))
    fork_id = f"{status.session_id}-fork"
    fork_input = forked_input(source_input, status.session_id, state, 2, None)
    harness.script(fork_id, [thinking_turn("Forked.", tool=False, text="still noon")])
    handle = await harness.client.start_workflow(
        AgentWorkflow.run, fork_input, id=fork_id, task_queue=harness.task_queue
    )
    forked = await asyncio.wait_for(handle.result(), 60)
    assert forked.status == "completed" and forked.answer == "still noon", forked.error
    [request] = [r["body"] for r in harness.requests(fork_id)]
    first = next(m for m in request["messages"] if m["role"] == "assistant")
    assert first["content"][0] == {"type": "thinking", "thinking": THOUGHT, "signature": sign(THOUGHT)}


async def test_tool_choice_applies_to_the_first_call_of_each_run_with_the_other_settings(harness: Harness):
    turns = [
        {"tool_calls": [{"name": "get_time", "input": {}}]}, answer("noon, END of answer"),
        {"tool_calls": [{"name": "get_time", "input": {}}]}, answer("still noon"),
    ]  # fmt: skip
    chosen = settings(tool_choice="get_time", temperature=0.3, stop_sequences=["END"])
    handle = await harness.start(turns, chat=True, model_settings=chosen)
    for _ in range(100):
        if (await handle.query(AgentWorkflow.status)).status == "waiting_input":
            break
        await asyncio.sleep(0.1)
    await handle.execute_update("send_message", {"text": "and now?"})
    await handle.execute_update("close_session")
    status = await asyncio.wait_for(handle.result(), 60)
    assert status.status == "completed", status.error
    requests = [r["body"] for r in harness.requests(handle.id)]
    assert [r.get("tool_choice") for r in requests] == [{"type": "tool", "name": "get_time"}, None] * 2
    assert all(r["temperature"] == 0.3 and r["stop_sequences"] == ["END"] for r in requests)
    history = await history_of(harness, handle.id)
    assert history.trace[1].text == "noon, "  # the model stopped at the stop sequence
    assert history.trace[1].stop_reason == "end_turn"


async def test_a_tool_choice_the_session_does_not_have_fails_it_before_any_model_call(harness: Harness):
    status = await harness.run([], model_settings=settings(tool_choice="no_such_tool"))
    assert status.status == "failed"
    assert status.error is not None and status.error.startswith("tool_choice 'no_such_tool' is not one of")
    assert harness.requests(status.session_id) == []


async def test_an_openai_model_gets_reasoning_effort_and_the_tool_choice(chat: ChatHarness):
    turns = [{"tool_calls": [{"name": "get_time", "input": {}}]}, answer("noon")]
    chosen = settings(thinking_budget=8000, tool_choice="none", temperature=1, stop_sequences=["X"])
    status = await chat.run(turns, model_settings=chosen, limits={"max_tokens": 16000})
    assert status.status == "completed", status.error
    requests = [r["body"] for r in chat.requests(status.session_id)]
    assert [r["reasoning_effort"] for r in requests] == ["medium", "medium"]
    assert [r.get("tool_choice") for r in requests] == ["none", None]
    assert all(r["temperature"] == 1 and r["stop"] == ["X"] for r in requests)
    # A tool by name, as Chat Completions names a function (the fake refuses any other shape).
    named = await chat.run([answer("x")], model_settings=settings(tool_choice="get_time"))
    assert named.status == "completed", named.error
    [request] = [r["body"] for r in chat.requests(named.session_id)]
    assert request["tool_choice"] == {"type": "function", "function": {"name": "get_time"}}


# ---- thinking streams to followers as its own events -------------------------------------


def _thinking_answer() -> tuple[dict[str, Any], str]:
    thought = "".join(f"thought {i:03d}. " for i in range(120))
    return {"thinking": thought, "text": "The answer.", "chunk_delay": 0.08}, thought


async def test_watch_json_gets_thinking_as_thinking_delta_never_as_answer_text(harness: Harness):
    from tests.test_watch import EMAIL

    turn, thought = _thinking_answer()
    # The first step waits for approval: the watch is following before the thinking streams.
    handle = await harness.start(
        [
            {
                "thinking": "An email first.",
                "tool_calls": [{"name": "send_email", "input": EMAIL, "id": "e1"}],
            },
            turn,
        ],
        model_settings=settings(thinking_budget="adaptive"),
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable, "client.py", "watch", handle.id, "--json", cwd=ROOT, env=cli_env(harness),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert process.stdout is not None
    events: list[dict[str, Any]] = []
    try:
        while not events or events[-1]["type"] != "approval":
            events.append(json.loads(await asyncio.wait_for(process.stdout.readline(), 60)))
        await handle.execute_update("approve_call", {"tool_use_id": "e1"})
        while events[-1]["type"] != "end":
            events.append(json.loads(await asyncio.wait_for(process.stdout.readline(), 60)))
        assert await asyncio.wait_for(process.wait(), 30) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    thinking = [e for e in events if e["type"] == "thinking_delta"]
    text = [e for e in events if e["type"] == "delta"]
    assert thinking and all(e["offset"] is None and e["step"] == 2 for e in thinking)
    assert "".join(e["text"] for e in thinking) == thought
    assert "".join(e["text"] for e in text) in ("", "The answer.")
    turn_event = next(e for e in events if e["type"] == "turn" and e["step"] == 2)
    assert turn_event["text"] == "The answer." and events[-1]["answer"] == "The answer."


@pytest_asyncio.fixture
async def api(client: Client, dev_server, fake_model: FakeModelServer, data_dir: Path, tmp_path_factory):
    async with serve_api(
        client, dev_server.address, fake_model, data_dir, tmp_path_factory.mktemp("thinking-api")
    ) as server:
        yield server


@pytest.mark.process
async def test_the_api_starts_a_thinking_session_and_sse_carries_thinking_delta(
    api: ApiProcess, fake_model: FakeModelServer
):
    turn, thought = _thinking_answer()
    session_id = f"think-{uuid.uuid4().hex[:8]}"
    fake_model.script.set(session_id, [turn])
    async with api.client("alice") as alice:
        bad = await alice.post("/v1/sessions", json={"goal": "g", "thinking_budget": 100})
        assert bad.status_code == 422 and "thinking_budget must be at least 1024" in bad.text, bad.text
        started = await alice.post(
            "/v1/sessions",
            json={
                "goal": "think",
                "session_id": session_id,
                "thinking_budget": "adaptive",
                "stop_sequences": ["ZZ"],
            },
        )
        assert started.status_code == 201, started.text
        events = await collect_events(alice, session_id)
    [request] = [r["body"] for r in fake_model.script.requests if r["session"] == session_id]
    assert request["thinking"] == {"type": "adaptive"} and request["stop_sequences"] == ["ZZ"]
    thinking = [e for e in events if e.event == "thinking_delta"]
    assert thinking and all(e.id is None for e in thinking)
    assert "".join(e.data["text"] for e in thinking) == thought
    assert thought not in "".join(e.data["text"] for e in events if e.event == "delta")
    assert events[-1].event == "end" and events[-1].data["answer"] == "The answer."


def test_a_state_recorded_without_thinking_types_reads_the_same():
    """A transcript recorded when thinking blocks were kept as unknown blocks reads into
    the same blocks, dumped the same."""
    raw = {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "s"},
                                            {"type": "redacted_thinking", "data": "d"}]}  # fmt: skip
    state = SessionState.model_validate(
        {
            "started_at": "2026-01-01T00:00:00Z",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "g"}]}, raw],
        }
    )
    assert state.messages[1].model_dump(mode="json", exclude_none=True) == raw
    assert state.messages[1].thinking() == "t"
    assert Limits().max_tokens > 1024


async def test_start_refuses_a_setting_with_one_line_and_records_what_it_allows(
    harness: Harness, tmp_path: Path
):
    from tests.test_agents import cli

    empty = tmp_path / "agents.toml"
    empty.write_text("")
    code, out, err = await cli(harness, "start", "g", "--thinking-budget", "4096", definitions=empty)
    assert code == 1 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "thinking_budget (4096) must be below max_tokens (4096)" in err
    code, _, err = await cli(harness, "start", "g", "--thinking-budget", "lots", definitions=empty)
    assert code == 1 and "neither a number of tokens nor 'adaptive'" in err, err
    session_id = f"cli-{uuid.uuid4().hex[:8]}"
    harness.script(session_id, [answer("fine")])
    code, out, err = await cli(
        harness, "start", "g", "--session", session_id, "--thinking-budget", "adaptive", "--top-p", "0.97",
        "--stop-sequence", "A", "--stop-sequence", "B", "--tool-choice", "none", "--wait", definitions=empty,
    )  # fmt: skip
    assert code == 0, err
    recorded = await harness.client.get_workflow_handle(session_id).fetch_history()
    first = recorded.events[0].workflow_execution_started_event_attributes.input.payloads[0].data
    assert SessionInput.model_validate_json(first).model_settings == ModelSettings(
        thinking_budget="adaptive", top_p=0.97, stop_sequences=["A", "B"], tool_choice="none"
    )


def test_watch_shows_the_thinking_dimmed_before_the_text():
    from cli.watch import _Streaming

    streaming = _Streaming()
    streaming.step, streaming.attempt = 1, 1
    streaming.thinking, streaming.text = "hmm, the time", "It is noon."
    shown = streaming._render()  # pyright: ignore[reportPrivateUsage]
    plain = shown.plain
    assert plain.index("hmm, the time") < plain.index("It is noon.")
    dimmed = [plain[span.start : span.end] for span in shown.spans if "dim" in str(span.style)]
    assert any("hmm, the time" in part for part in dimmed)
    assert not any("It is noon." in part for part in dimmed)


async def test_reasoning_an_openai_compatible_server_streams_is_thinking_and_is_not_kept(
    fake_chat: FakeChatServer,
):
    import openai

    provider = OpenAIProvider(
        client=openai.AsyncOpenAI(base_url=fake_chat.base_url, api_key="t", max_retries=0)
    )
    session = f"reason-{uuid.uuid4().hex[:6]}"
    fake_chat.script.set(session, [{"reasoning": "step one, step two", "text": "two"}])
    thought: list[str] = []
    text: list[str] = []

    async def on_text(piece: str) -> None:
        text.append(piece)

    async def on_thinking(piece: str) -> None:
        thought.append(piece)

    call = ProviderCall(
        model="gpt-test", system="", max_tokens=100, tools=[], stream=True, headers={"x-agent-session": session},
        messages=[{"role": "user", "content": [{"type": "text", "text": "count"}]}],
    )  # fmt: skip
    turn = await provider.complete(call, on_text, on_thinking)
    assert "".join(thought) == "step one, step two" and "".join(text) == "two"
    assert [b.type for b in turn.message.content] == ["text"] and turn.message.text() == "two"
