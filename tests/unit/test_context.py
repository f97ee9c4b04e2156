"""Invariants of context fitting, over random histories (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from activities.context import Tail, estimate_tokens, fit

texts = st.text(alphabet="abcdefghij klmnop", min_size=0, max_size=400)


@st.composite
def histories(draw) -> list[dict]:
    messages = [{"role": "user", "content": [{"type": "text", "text": draw(texts) or "goal"}]}]
    counter = 0
    for _ in range(draw(st.integers(min_value=0, max_value=25))):
        calls = draw(st.integers(min_value=0, max_value=3))
        content = [{"type": "text", "text": draw(texts)}] if draw(st.booleans()) or not calls else []
        ids = []
        for _ in range(calls):
            counter += 1
            ids.append(f"t{counter}")
            content.append({"type": "tool_use", "id": ids[-1], "name": "x", "input": {"q": draw(texts)}})
        messages.append({"role": "assistant", "content": content})
        if ids:
            reply = [{"type": "tool_result", "tool_use_id": i, "content": draw(texts)} for i in ids]
        else:
            reply = [{"type": "text", "text": draw(texts) or "more"}]
        messages.append({"role": "user", "content": reply})
    return messages


@settings(max_examples=400, deadline=None)
@given(histories(), st.integers(min_value=50, max_value=5000), st.integers(min_value=0, max_value=200))
def test_fitting_keeps_pairs_order_and_the_goal(messages, budget, fixed):
    fitted = fit(messages, budget, fixed=fixed)
    out = fitted.messages
    total = fixed + sum(estimate_tokens(m) for m in messages)
    if total <= budget:
        assert out == messages and fitted.dropped == []
        return
    # The goal comes first, unchanged but for an added note.
    assert out[0]["role"] == "user"
    assert out[0]["content"][: len(messages[0]["content"])] == messages[0]["content"]
    # The rest is a contiguous tail; the dropped middle plus the tail is everything.
    tail = out[1:]
    assert messages[len(messages) - len(tail) :] == tail
    assert [messages[0], *fitted.dropped, *tail] == messages
    # Roles alternate, starting with the user.
    assert [m["role"] for m in out] == ["user", "assistant"] * (len(out) // 2) + ["user"] * (len(out) % 2)
    # Every tool_result follows the assistant message that asked for it, and every
    # tool_use is answered in the next message.
    for i, message in enumerate(out):
        results = {b["tool_use_id"] for b in message["content"] if b["type"] == "tool_result"}
        if results:
            asked = {b["id"] for b in out[i - 1]["content"] if b["type"] == "tool_use"}
            assert i > 0 and results == asked
        uses = {b["id"] for b in message["content"] if b["type"] == "tool_use"}
        if uses and i + 1 < len(out):
            answered = {b["tool_use_id"] for b in out[i + 1]["content"] if b["type"] == "tool_result"}
            assert answered == uses
    # Something was left out only to fit, and what was kept fits unless even the
    # shortest possible tail is too big.
    if fitted.dropped:
        assert "left out to fit the context window" in out[0]["content"][-1]["text"]
        shortest = max(i for i in range(2, len(messages)) if messages[i]["role"] == "assistant")
        if len(tail) > len(messages) - shortest:
            assert fitted.estimated_tokens <= budget


def test_no_cut_when_it_fits():
    messages = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert fit(messages, 10).messages == messages


@settings(max_examples=200, deadline=None)
@given(histories(), st.integers(min_value=50, max_value=5000))
def test_known_sizes_fit_as_worked_out_ones(messages, budget):
    """The model activity passes the estimates it remembers per transcript: same result."""
    sizes = [estimate_tokens(m) for m in messages]
    assert fit(messages, budget, sizes=sizes) == fit(messages, budget)
    # Estimates that do not match the messages are not trusted.
    assert fit(messages, budget, sizes=sizes[:-1]) == fit(messages, budget)


@st.composite
def thinking_histories(draw) -> list[dict]:
    """Histories with thinking blocks, tool turns and a person's messages between turns."""
    messages = [{"role": "user", "content": [{"type": "text", "text": draw(texts) or "goal"}]}]
    for i in range(draw(st.integers(min_value=0, max_value=30))):
        content = []
        if draw(st.booleans()):
            content.append({"type": "thinking", "thinking": draw(texts), "signature": "s"})
        if draw(st.booleans()):
            content.append({"type": "tool_use", "id": f"t{i}", "name": "x", "input": {"q": draw(texts)}})
            messages.append({"role": "assistant", "content": content})
            messages.append(
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": draw(texts)}],
                }
            )
        else:
            messages.append(
                {"role": "assistant", "content": [*content, {"type": "text", "text": draw(texts)}]}
            )
            messages.append({"role": "user", "content": draw(texts) or "more"})
    return messages


@settings(max_examples=100, deadline=None)
@given(
    thinking_histories(),
    st.integers(min_value=1, max_value=4000),
    st.integers(min_value=1, max_value=6),
    st.lists(st.integers(min_value=-200, max_value=4000), min_size=1, max_size=4),
    st.integers(min_value=0, max_value=300),
)
def test_a_trimmed_tail_fits_as_the_whole_transcript(messages, keep, chunk, budgets, fixed):
    """A tail that keeps, message by message, only what a fit within `keep` tokens can send
    sends what a fit over the whole transcript sends, for every budget up to `keep`."""
    tail = Tail.of([])
    for at in range(0, len(messages), chunk):
        tail = tail.extended(messages[at : at + chunk]).trimmed(keep)
        seen = messages[: at + chunk]
        assert tail.count == len(seen)
        assert tail.messages[1:] == seen[tail.start :] and tail.messages[:1] == seen[:1]
        for budget in [keep, *(b for b in budgets if b <= keep)]:
            for summary in (None, "what happened"):
                cut = tail.fit(budget, fixed=fixed, summary=summary)
                whole = fit(seen, budget, fixed=fixed, summary=summary)
                assert (cut.messages, seen[1 : 1 + cut.left_out], cut.estimated_tokens) == (
                    whole.messages, whole.dropped, whole.estimated_tokens,
                )  # fmt: skip


def test_a_long_transcripts_tail_stays_the_size_of_its_budget():
    tail = Tail.of([{"role": "user", "content": [{"type": "text", "text": "goal"}]}])
    for i in range(3000):
        tail = tail.extended([
            {"role": "assistant", "content": [{"type": "tool_use", "id": f"t{i}", "name": "x", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": "y" * 1000}]},
        ]).trimmed(2000)  # fmt: skip
    assert tail.count == 6001 and not tail.whole
    # About 2,000 tokens of 300-token results, plus the goal: never the whole transcript.
    assert len(tail.messages) <= 20 and sum(tail.sizes) < 2000 + 2 * 310
    assert tail.covers is not None and tail.covers >= 2000
