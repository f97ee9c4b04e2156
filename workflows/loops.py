"""Loops: a model that repeats a call, and what the session does about it.

A repeat is either the same tool with the same input, counted over the whole session
(`SessionState.repeats`, kept through continue-as-new), or, under a loop policy, the
same tool returning the same output several times in a row (`output_streaks`), which
catches a write that "succeeds" every time. Without a policy the model is told at the
third identical call (`REPEAT_NOTE_AT`) and nothing more: legitimate polling repeats its
input, so stopping is opt-in.

An agent's `loop_policy = {after = N, action = ...}` makes a call a repeat when it is the
N-th with the same input, or when its tool's last N calls returned the same output; then:
- `note`: it runs, and its result tells the model it repeats itself;
- `ask`: it waits for a person's approval, with the reason; a denial is the model's error;
- `stop`: it does not run, and the session ends `stopped` with `stop_reason` `loop`.
The result that brings an output streak to N carries the note under every action, so the
model is told before its next call is judged. Nothing here issues a Temporal command.
"""

from __future__ import annotations

import hashlib

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.contract import LoopPolicy
    from workflows.records import OutputStreak, Repeat, ToolCallRecord
    from workflows.state import SessionState

# Without a policy: from this many identical calls on, the model is told that it repeats itself.
REPEAT_NOTE_AT = 3
STOP_REASON = "loop"
# `status --json`'s `repeats`: at most this many, of at least two calls each.
REPEATS_SHOWN = 20


class Loops:
    def __init__(self, state: SessionState, policy: LoopPolicy | None) -> None:
        self.state = state
        self.policy = policy

    def count(self, call: ToolCallRecord) -> None:
        """A call starts: count it, and under a policy say whether it is a repeat."""
        call.repeats = self._counted(call)
        if self.policy is not None:
            call.repeat_reason = self._why_repeat(call, self.policy.after)

    def stopping(self, calls: list[ToolCallRecord]) -> ToolCallRecord | None:
        """Under `stop`, the first call of a response that would be a repeat, if any:
        every new call is counted, and none runs."""
        if self.policy is None or self.policy.action != "stop":
            return None
        fresh = [c for c in calls if c.status == "pending" and c.started_at is None and c.ended_at is None]
        after, repeats = self.policy.after, dict(self.state.repeats)
        for call in fresh:
            count = repeats.get(call.repeat_key(), repeats.get(call.plain_repeat_key(), 0)) + 1
            repeats[call.repeat_key()] = count
            streak = self.state.output_streaks.get(call.name)
            if count >= after or (streak is not None and streak.count >= after):
                for each in fresh:
                    self.count(each)
                return call
        return None

    def asks(self, call: ToolCallRecord) -> bool:
        """Whether the call waits for a person because it repeats (`ask`)."""
        return self.policy is not None and self.policy.action == "ask" and call.repeat_reason is not None

    def ended(self, call: ToolCallRecord, output: str, is_error: bool) -> str:
        """The call returned `output`: its streak counted; the note the model gets, if any."""
        if self.policy is None:
            if call.repeats >= REPEAT_NOTE_AT:
                return _same_input_note(call)
            return ""
        digest = hashlib.sha256(f"{int(is_error)}:{output}".encode()).hexdigest()[:32]
        call.output_digest = digest
        streak = self.state.output_streaks.pop(call.name, None)
        if streak is None or streak.digest != digest:
            streak = OutputStreak(digest=digest)
        else:
            streak.count += 1
        self.state.output_streaks[call.name] = streak  # the latest tool last, as a handover keeps it
        notes: list[str] = []
        if call.repeats >= self.policy.after:
            notes.append(_same_input_note(call))
        if streak.count >= self.policy.after:
            notes.append(
                f"\n[note: {call.name} has now returned this same output {streak.count} times in a row; "
                "you are repeating yourself, try a different approach]"
            )
        return "".join(notes)

    def _counted(self, call: ToolCallRecord) -> int:
        # Counted again at the end: the most recent calls' keys are the last ones, those a
        # handover keeps (workflows/archive.py).
        key, repeats = call.repeat_key(), self.state.repeats
        count = repeats.pop(key, None)
        if count is None:
            count = repeats.pop(call.plain_repeat_key(), 0)
        repeats[key] = count + 1
        return count + 1

    def _why_repeat(self, call: ToolCallRecord, after: int) -> str | None:
        if call.repeats >= after:
            return f"{call.name} was called with the same input {call.repeats} times"
        streak = self.state.output_streaks.get(call.name)
        if streak is not None and streak.count >= after:
            return f"{call.name} returned the same output {streak.count} times in a row"
        return None


def repeats_seen(state: SessionState) -> list[Repeat]:
    """The calls repeated at least twice, most first: `status --json`'s `repeats`."""
    found = [
        Repeat(name=key.partition(":")[0], kind="input", count=n)
        for key, n in state.repeats.items()
        if n >= 2
    ]
    found += [
        Repeat(name=name, kind="output", count=s.count)
        for name, s in state.output_streaks.items()
        if s.count >= 2
    ]
    return sorted(found, key=lambda r: -r.count)[:REPEATS_SHOWN]


def _same_input_note(call: ToolCallRecord) -> str:
    return (
        f"\n[note: this exact call ({call.name} with the same input) has now been made "
        f"{call.repeats} times; you are repeating yourself, try a different approach]"
    )
