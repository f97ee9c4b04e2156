"""Fitting a transcript into the model's context window.

When the whole transcript would not fit, the first user message (the goal) and a run of
recent messages that fits are kept, and a note (or a summary of what was left out) is
added to the first message. The cut moves in jumps of about half the budget rather than
one message per step, so the kept prefix stays the same for many steps and the
provider's prompt cache keeps serving it. The kept tail always starts with an assistant
message, so a `tool_result` never loses the `tool_use` it answers and roles still
alternate; and never an assistant message of a turn whose thinking block (in an earlier
message of the same turn) would be left out, unless it has its own: the API refuses a tool
call kept without its turn's thinking. Token counts are estimated at 3.5 characters of JSON per token (Anthropic's
tokenizers average 3.5 to 4 for English and code); near the limit the model activity asks
the provider's token counting endpoint instead.

Attachments (stored image and document blocks) are counted by what they cost the model,
never as the text of their base64, by Anthropic's published rules: an image about
width x height / 750 tokens, after scaling to at most 1568 pixels on its long edge and
1.15 megapixels (so at most about 1,600); a PDF about 3,000 tokens a page (the page's text
plus the page as an image), and 100 pages' worth when its page count is unknown; a text
file as its text.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, cast

CHARS_PER_TOKEN = 3.5


IMAGE_LONG_EDGE = 1568
IMAGE_PIXELS = 1_150_000
IMAGE_TOKENS_MAX = 1600
PDF_PAGE_TOKENS = 3000
PDF_PAGES_UNKNOWN = 100


def estimate_tokens(value: Any) -> int:
    blocks = _content(value)
    if blocks and any(_attachment(b) for b in blocks):
        rest = {**value, "content": [b for b in blocks if not _attachment(b)]}
        return estimate_tokens(rest) + sum(attachment_tokens(b["source"]) for b in blocks if _attachment(b))
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def attachment_tokens(source: dict[str, Any]) -> int:
    """What a stored attachment costs the model, by its kind (the module's docstring)."""
    media_type = source.get("media_type", "")
    if media_type.startswith("image/"):
        return image_tokens(source.get("width"), source.get("height"))
    if media_type == "application/pdf":
        return PDF_PAGE_TOKENS * (source.get("pages") or PDF_PAGES_UNKNOWN)
    return math.ceil(int(source.get("size", 0)) / CHARS_PER_TOKEN)


def image_tokens(width: int | None, height: int | None) -> int:
    if not width or not height:
        return IMAGE_TOKENS_MAX
    scale = min(1.0, IMAGE_LONG_EDGE / max(width, height), math.sqrt(IMAGE_PIXELS / (width * height)))
    return min(IMAGE_TOKENS_MAX, max(1, math.ceil(width * height * scale * scale / 750)))


def _content(value: Any) -> list[Any] | None:
    if not isinstance(value, dict):
        return None
    content = cast("dict[str, Any]", value).get("content")
    return cast("list[Any]", content) if isinstance(content, list) else None


def _attachment(block: Any) -> bool:
    if not isinstance(block, dict):
        return False
    fields = cast("dict[str, Any]", block)
    source = fields.get("source")
    return (
        fields.get("type") in ("image", "document")
        and isinstance(source, dict)
        and cast("dict[str, Any]", source).get("type") == "stored"
    )


@dataclass(frozen=True)
class Fitted:
    messages: list[dict[str, Any]]
    dropped: list[dict[str, Any]]
    estimated_tokens: int


@dataclass(frozen=True)
class Cut:
    """What `Tail.fit` sends: the messages, and how many after the goal it leaves out."""

    messages: list[dict[str, Any]]
    left_out: int
    estimated_tokens: int


def omission_note(count: int, summary: str | None) -> str:
    if summary:
        return (
            f"[{count} earlier messages were left out to fit the context window. Summary of them: {summary}]"
        )
    return f"[{count} earlier messages were left out to fit the context window.]"


def fit(
    messages: list[dict[str, Any]],
    budget: int,
    *,
    fixed: int = 0,
    summary: str | None = None,
    sizes: list[int] | None = None,
) -> Fitted:
    """The messages to send within `budget` tokens (`fixed` is spent on system and tools).

    `sizes` are the messages' `estimate_tokens`, when the caller has them already.
    """
    if sizes is None or len(sizes) != len(messages):
        sizes = [estimate_tokens(m) for m in messages]
    cut = Tail.of(messages, sizes).fit(budget, fixed=fixed, summary=summary)
    return Fitted(cut.messages, list(messages[1 : 1 + cut.left_out]), cut.estimated_tokens)


class Tail:
    """The part of a transcript that fitting can still send: the goal and the messages
    from `start` on, with what fitting needs to know of the rest (the estimates' sum, the
    state of the cut points). A long session's model activity keeps this in memory
    rather than the whole transcript; what it left out is read from the store when a
    summary of it is asked for.

    `trimmed(keep)` leaves out the older messages that no fit within `keep` tokens can
    send: a message goes when even the run of messages from it to the end, with the goal,
    is over `keep` (so no cut point before it can fit), and never past the last cut point
    (which is what is sent when nothing fits). A fit within a budget up to `covers` then
    picks the same cut, and sends the same messages, as one over the whole transcript.
    """

    __slots__ = ("covers", "messages", "points", "sizes", "start", "summarized", "thought", "total")

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []  # the goal, then the transcript's messages from `start`
        self.sizes: list[int] = []  # their `estimate_tokens`
        self.start = 1  # the index in the transcript of `messages[1]`
        self.total = 0  # the estimates' sum over the whole transcript
        self.points: list[int] = []  # the cut points from `start` on (`cut_points`)
        self.thought = False  # `cut_points`' state after the last message
        self.covers: int | None = None  # the largest budget fitted as the whole; None: it is whole
        self.summarized: tuple[int, str] | None = None  # (messages left out, the key of their summary)

    @classmethod
    def of(cls, messages: list[dict[str, Any]], sizes: list[int] | None = None) -> Tail:
        return cls().extended(messages, sizes)

    @property
    def count(self) -> int:
        """The number of messages in the whole transcript."""
        return self.start - 1 + len(self.messages)

    @property
    def whole(self) -> bool:
        return self.start == 1

    def extended(self, messages: list[dict[str, Any]], sizes: list[int] | None = None) -> Tail:
        """A new tail with `messages` added at the end (this one is left as it is)."""
        if sizes is None or len(sizes) != len(messages):
            sizes = [estimate_tokens(m) for m in messages]
        tail = Tail()
        tail.messages = [*self.messages, *messages]
        tail.sizes = [*self.sizes, *sizes]
        tail.start = self.start
        tail.total = self.total + sum(sizes)
        tail.points = list(self.points)
        tail.covers = None if self.covers is None else self.covers + sum(sizes)
        tail.summarized = self.summarized
        thought = self.thought
        for i, message in enumerate(messages, start=self.count):
            thought, point = _cut_point(i, message, thought)
            if point:
                tail.points.append(i)
        tail.thought = thought
        return tail

    def trimmed(self, keep: int) -> Tail:
        """This tail without the messages no fit within `keep` tokens can send (see above)."""
        if not self.points or not self.messages:
            return self
        first = self.sizes[0]
        run = sum(self.sizes[1:])
        at = self.start  # the first message kept
        while at < self.points[-1] and run + first > keep:
            run -= self.sizes[at - self.start + 1]
            at += 1
        if at == self.start:
            return self
        left = (
            self.sizes[at - self.start] + run + first - 1
        )  # the run from `at - 1`, with the goal: over `keep`
        tail = Tail()
        tail.messages = [self.messages[0], *self.messages[at - self.start + 1 :]]
        tail.sizes = [first, *self.sizes[at - self.start + 1 :]]
        tail.start = at
        tail.total = self.total
        tail.points = [p for p in self.points if p >= at]
        tail.thought = self.thought
        tail.covers = left
        tail.summarized = self.summarized
        return tail

    def all_messages(self) -> list[dict[str, Any]]:
        if not self.whole:
            raise ValueError("the tail of a transcript is not the whole of it")
        return list(self.messages)

    def fit(self, budget: int, *, fixed: int = 0, summary: str | None = None) -> Cut:
        """The messages to send within `budget` tokens (`fixed` is spent on system and tools).

        When the whole transcript would not fit, the goal and a run of recent messages that
        fits, starting at a cut point; the cut is quantised (the module's docstring)."""
        if self.covers is not None and budget > self.covers:
            raise ValueError(f"a tail kept for {self.covers} tokens cannot be fitted to {budget}")
        total = fixed + self.total
        if total <= budget or self.count < 3 or not self.points:
            return Cut(self.all_messages(), 0, total)
        suffix = _suffix_sums(self.sizes)

        def run(s: int) -> int:  # the estimates from message `s` to the end
            return suffix[s - self.start + 1]

        def before(s: int) -> int:
            return self.total - run(s)

        goal = self.messages[0]
        shortest = self.points[-1]  # if nothing fits
        fitting = next(
            (s for s in self.points
             if fixed + estimate_tokens(_with_note(goal, omission_note(s - 1, summary))) + run(s) <= budget),
            shortest,
        )  # fmt: skip
        # Quantise the cut on the (append-only, so stable) running size of the transcript.
        quantum = max(1, budget // 2)
        target = math.ceil(before(fitting) / quantum) * quantum
        chosen = next((s for s in self.points if s >= fitting and before(s) >= target), fitting)
        first = _with_note(goal, omission_note(chosen - 1, summary))
        kept = [first, *self.messages[chosen - self.start + 1 :]]
        return Cut(kept, chosen - 1, fixed + estimate_tokens(first) + run(chosen))


THINKING = ("thinking", "redacted_thinking")


def cut_points(messages: list[dict[str, Any]]) -> list[int]:
    """Where the kept tail may start: an assistant message (after the goal and one more),
    but not one whose turn thought in an earlier message and that does not think itself."""
    points: list[int] = []
    thought = False  # the current turn (since a person's message) has a thinking block
    for i, message in enumerate(messages):
        thought, point = _cut_point(i, message, thought)
        if point:
            points.append(i)
    return points


def _cut_point(i: int, message: dict[str, Any], thought: bool) -> tuple[bool, bool]:
    """`cut_points`' state after message `i`, and whether the tail may start at it."""
    blocks = _blocks(message)
    if message["role"] != "assistant":
        if any(b.get("type") != "tool_result" for b in blocks):
            thought = False  # a person's message opens a new turn
        return thought, False
    starts_thinking = bool(blocks) and blocks[0].get("type") in THINKING
    point = i >= 2 and (starts_thinking or not thought)
    return thought or any(b.get("type") in THINKING for b in blocks), point


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def _suffix_sums(sizes: list[int]) -> list[int]:
    sums = [0] * (len(sizes) + 1)
    for i in range(len(sizes) - 1, -1, -1):
        sums[i] = sums[i + 1] + sizes[i]
    return sums


def _with_note(message: dict[str, Any], note: str) -> dict[str, Any]:
    content = message["content"]
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    return {**message, "content": [*blocks, {"type": "text", "text": note}]}


SUMMARY_PROMPT = (
    "Summarise the conversation excerpt below for the agent that will continue it: the facts "
    "learned, the tool results that matter, decisions made and what is still open. Be brief."
)


def summary_request(dropped: list[dict[str, Any]], budget: int) -> list[dict[str, Any]]:
    """The messages of the one model call that summarises the dropped middle (cut to fit)."""
    excerpt = json.dumps(dropped, ensure_ascii=False)
    limit = int(budget * CHARS_PER_TOKEN * 0.8)
    if len(excerpt) > limit:
        excerpt = excerpt[-limit:]
    return [{"role": "user", "content": [{"type": "text", "text": f"{SUMMARY_PROMPT}\n\n{excerpt}"}]}]
