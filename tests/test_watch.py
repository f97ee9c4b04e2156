"""`python client.py watch`: attached mid-run and after the end, JSON lines, streamed text
(live from the worker, no offset; a retried attempt's partial text replaced, never shown
twice), and a real terminal (tmux) where the approval prompt is answered with "y"."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from infra.datadir import read_effects
from tests.conftest import ROOT, Harness, answer, tool_use
from tests.support.procs import wait_for_status
from workflows.contract import Decision, SessionStatus

EMAIL = {"to": "team@example.com", "subject": "hi", "body": "x"}
# A long text: the fake model streams it in 24-character chunks, `chunk_delay` apart.
MARKER = "ZEBRA-MARKER-7"
LONG = MARKER + " " + " ".join(f"word{i:03d}" for i in range(170))  # about 1,400 characters


def cli_env(harness: Harness) -> dict[str, str]:
    return {
        **os.environ,
        "TEMPORAL_ADDRESS": harness.client.service_client.config.target_host,
        "TEMPORAL_NAMESPACE": harness.client.namespace,
        "TEMPORAL_TASK_QUEUE": harness.task_queue,
        "TEMPORAL_UI_URL": "http://127.0.0.1:8233",
        "COLUMNS": "200",
    }


async def run_cli(harness: Harness, *args: str, timeout: float = 60) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "client.py", *args, cwd=ROOT, env=cli_env(harness),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    return await process.wait(), out.decode(), err.decode()


async def test_watch_after_the_end_shows_the_whole_session(harness: Harness):
    handle = await harness.start(
        [tool_use("get_time", {"timezone_name": "UTC"}, id="t1", text="Checking the clock."),
         tool_use("explode", {"message": "disk on fire"}, id="t2"),
         answer("It is noon.")],
        model="claude-sonnet-4-6", price={"input": 3, "output": 15, "cache_write": 3.75, "cache_read": 0.3},
    )  # fmt: skip
    result = await handle.result()
    assert result.status == "completed"
    code, out, err = await run_cli(harness, "watch", handle.id)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(f"watching {handle.id}")
    assert "step 1 Checking the clock." in out
    assert '→ get_time {"timezone_name": "UTC"}' in out
    # each tool result: mark, name, duration, shortened output
    done = next(line for line in lines if "✓ get_time" in line)
    assert " ms " in done or " s " in done
    failed = next(line for line in lines if "✗ explode" in line)
    assert "disk on fire" in failed
    # running totals after each turn: steps, tokens and cost
    totals = [line for line in lines if "↳" in line]
    assert len(totals) == 3
    assert "so far 1 step · " in totals[0] and "so far 3 steps · " in totals[2]
    assert all(" tokens (in " in t and "$0.0" in t for t in totals)
    assert f"{result.usage.total():,} tokens" in totals[2]
    assert "■ completed" in out
    assert out.count("It is noon.") == 1  # the answer is the last turn's text: shown once
    assert out.index("step 1") < out.index("→ get_time") < out.index("✓ get_time") < out.index("■ completed")


async def test_watch_exit_code_when_not_completed(harness: Harness):
    handle = await harness.start([answer("half an ans", stop_reason="max_tokens")])
    await handle.result()
    code, out, _ = await run_cli(harness, "watch", handle.id)
    assert code == 2
    assert "■ stopped (max_tokens)" in out


async def test_watch_attached_mid_run_shows_the_past_then_follows(harness: Harness):
    handle = await harness.start(
        [tool_use("send_email", EMAIL, id="e1", text="First I will email the team."), answer("Sent it.")]
    )
    await wait_for_status(handle, "waiting_approval")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "client.py", "watch", handle.id, cwd=ROOT, env=cli_env(harness),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        seen: list[str] = []
        deadline = time.monotonic() + 30
        while not any("deny:" in line for line in seen):
            assert time.monotonic() < deadline, f"no approval hint in: {seen}"
            assert process.stdout is not None  # stdout=PIPE
            line = await asyncio.wait_for(process.stdout.readline(), deadline - time.monotonic())
            assert line, f"watch ended early: {seen}"
            seen.append(line.decode())
        text = "".join(seen)
        # what happened before it attached
        assert "First I will email the team." in text and "→ send_email" in text
        assert "waiting for approval: send_email" in text
        assert f"approve: python client.py approve {handle.id} e1" in text
        assert f"deny:    python client.py deny {handle.id} e1" in text
        assert process.returncode is None  # still following
        await handle.execute_update("approve_call", Decision(tool_use_id="e1"), result_type=str)
        rest, _ = await asyncio.wait_for(process.communicate(), 30)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    rest = rest.decode()
    assert process.returncode == 0
    assert "approved send_email (e1)" in rest
    assert "✓ send_email" in rest and "step 2 Sent it." in rest and "■ completed" in rest


async def read_json_lines(process: asyncio.subprocess.Process, until, timeout: float = 30) -> list[dict]:
    """`watch --json`'s events as they come, up to the first one `until` accepts."""
    seen: list[dict] = []
    deadline = time.monotonic() + timeout
    while not (seen and until(seen[-1])):
        assert time.monotonic() < deadline, f"not seen in time; seen: {seen}"
        assert process.stdout is not None  # stdout=PIPE
        line = await asyncio.wait_for(process.stdout.readline(), deadline - time.monotonic())
        assert line, f"watch ended early: {seen}"
        seen.append(json.loads(line))
    return seen


async def test_watch_json_lines_and_attempt_tags(harness: Harness):
    # The text streams live (never through Temporal) to a watch attached before the call:
    # the session waits for an approval first, until the watch has caught up.
    gate = tool_use("send_email", EMAIL, id="e1")
    cut = {
        "text": LONG,
        "chunk_delay": 0.02,
        "cut_stream": True,
        "tool_calls": [{"name": "get_time", "id": "t1"}],
    }
    whole = {"text": LONG, "chunk_delay": 0.02, "tool_calls": [{"name": "get_time", "id": "t1"}]}
    handle = await harness.start([gate, cut, whole, answer("done")])
    await wait_for_status(handle, "waiting_approval")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "client.py", "watch", handle.id, "--json", cwd=ROOT, env=cli_env(harness),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        events = await read_json_lines(process, lambda e: e["type"] == "approval")
        await handle.execute_update("approve_call", Decision(tool_use_id="e1"), result_type=str)
        events += await read_json_lines(process, lambda e: e["type"] == "end", timeout=60)
        assert await asyncio.wait_for(process.wait(), 10) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert (await handle.result()).status == "completed"
    assert events[-1]["type"] == "end" and events[-1]["status"] == "completed"
    durable = [e for e in events if e["topic"] == "event"]
    assert [e["offset"] for e in durable] == list(range(len(durable)))  # every event, in order
    deltas = [e for e in events if e["topic"] == "delta"]
    assert all(d["offset"] is None for d in deltas)  # live text has no place in the stream
    assert {(d["step"], d["attempt"]) for d in deltas if d["step"] == 2} == {(2, 1), (2, 2)}
    # The short answer of step 3 streams no delta unless its call outlasts a look for it
    # (a loaded machine): then its own text, once.
    assert "".join(d["text"] for d in deltas if d["step"] == 3) in ("", "done")
    assert {d["step"] for d in deltas} <= {2, 3}
    first = "".join(d["text"] for d in deltas if (d["step"], d["attempt"]) == (2, 1))
    second = "".join(d["text"] for d in deltas if (d["step"], d["attempt"]) == (2, 2))
    assert second == LONG and LONG.startswith(first) and first.startswith(MARKER)
    turn = next(e for e in events if e["type"] == "turn" and e["step"] == 2)
    assert turn["attempt"] == 2 and turn["text"] == LONG
    assert max(i for i, e in enumerate(events) if e["topic"] == "delta" and e["step"] == 2) < events.index(
        turn
    )
    kinds = [e["type"] for e in durable]
    assert kinds.index("turn") < kinds.index("tool_call") < kinds.index("tool_result") < kinds.index("end")

    # After the end: the same events at the same offsets; the text is in the turns.
    code, out, err = await run_cli(harness, "watch", handle.id, "--json")
    assert code == 0, err
    assert [json.loads(line) for line in out.splitlines()] == durable

    # The person's view: the text once, from the attempt that counted.
    code, out, _ = await run_cli(harness, "watch", handle.id)
    assert code == 0
    assert out.count(MARKER) == 1
    assert "step 2 (attempt 2) " + LONG in out


# ---- a real terminal -----------------------------------------------------------------------


class Tmux:
    """One tmux server on its own socket; ended by its PID."""

    def __init__(self, tmp: Path):
        self.socket = str(tmp / "tmux.sock")
        self.pid: int | None = None

    def run(self, *args: str) -> str:
        return subprocess.run(
            ["tmux", "-S", self.socket, *args], check=True, capture_output=True, text=True
        ).stdout

    def start(self, command: str, env: dict[str, str]) -> None:
        exports = [arg for key in ("TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "TEMPORAL_TASK_QUEUE", "TEMPORAL_UI_URL",
                                   "AGENT_DATA_DIR", "PATH", "HOME") if key in env for arg in ("-e", f"{key}={env[key]}")]  # fmt: skip
        self.run(
            "-f", "/dev/null", "new-session", "-d", "-s", "w", "-x", "150", "-y", "45", *exports, command
        )
        self.pid = int(self.run("display-message", "-p", "-t", "w", "#{pid}").strip())
        self.run("set-option", "-t", "w", "remain-on-exit", "on")

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-J", "-t", "w", "-S", "-3000")

    def keys(self, *keys: str) -> None:
        self.run("send-keys", "-t", "w", *keys)

    def wait_for(self, check, what: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if check(screen):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"never saw {what}; the screen:\n{screen}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.pid is not None:
            os.kill(self.pid, 15)
            self.pid = None


@pytest.mark.process
async def test_watch_in_a_real_terminal_streams_and_asks(
    harness: Harness, tmp_path: Path, tmux_installed: str
):
    session = f"tty-{uuid.uuid4().hex[:8]}"
    email = {**tool_use("send_email", EMAIL, id="e1"), "text": LONG}
    cut = {**email, "chunk_delay": 0.04, "cut_stream": True}
    whole = {**email, "chunk_delay": 0.04}
    handle = await harness.start([cut, whole, answer("The email went out.")], session_id=session)
    tmux = Tmux(tmp_path)
    log = tmp_path / "watch.log"
    try:
        tmux.start(
            f"{sys.executable} {ROOT / 'client.py'} watch {session}; echo EXIT=$? >> {log}", cli_env(harness)
        )

        def poll(check, what: str, timeout: float = 30) -> str:
            return tmux.wait_for(check, what, timeout)

        # The text appears while the model is still writing it (before the turn's totals line),
        # and the retried attempt replaces the first one's partial text.
        await asyncio.to_thread(poll, lambda s: MARKER in s and "↳" not in s, "streamed text")
        live = await asyncio.to_thread(
            poll, lambda s: "(attempt 2) ▍" in s and "↳" not in s, "the retried attempt"
        )
        assert live.count(MARKER) == 1
        screen = await asyncio.to_thread(
            poll, lambda s: "approve send_email? [y/n]" in s, "the approval prompt"
        )
        assert screen.count(MARKER) == 1, screen
        assert f"approve: python client.py approve {session} e1" in screen
        assert (await handle.query("status", result_type=SessionStatus)).status == "waiting_approval"
        tmux.keys("y", "Enter")
        screen = await asyncio.to_thread(poll, lambda s: "■ completed" in s, "the end")
        result = await asyncio.wait_for(handle.result(), 30)
        assert result.status == "completed" and result.answer == "The email went out."
        assert "approved send_email (e1)" in screen and "✓ send_email" in screen
        assert screen.count(MARKER) == 1, screen
        effects = [e for e in read_effects() if e["session_id"] == session]
        assert len(effects) == 1 and effects[0]["tool"] == "send_email"
        deadline = time.monotonic() + 10
        while not log.exists() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert log.read_text().strip() == "EXIT=0"
        (ROOT / "test-output").mkdir(exist_ok=True)
        (ROOT / "test-output" / "watch-terminal.txt").write_text(screen)
    finally:
        tmux.stop()
