"""What every contender shares: the tool, the scripted model turns, small statistics."""

from __future__ import annotations

import hashlib
import itertools
import statistics
from typing import Any

MODEL = "claude-sonnet-4-6"
GOAL = "Look things up, one lookup per step, then answer."
SYSTEM = "You are a careful assistant. Use the tools when they help, then answer briefly."
TOOL_NAME = "lookup"
TOOL_DESCRIPTION = "Look up a query and return what is known about it."
TOOL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"query": {"type": "string"}, "size": {"type": "integer", "default": 64}},
    "required": ["query"],
    "additionalProperties": False,
}
SMALL_OUTPUT = 64
WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "november",
]


def lookup_text(query: str, size: int = SMALL_OUTPUT) -> str:
    """The tool's work, the same in every contender: `size` characters of text unique to the query."""
    seed = hashlib.sha256(query.encode()).hexdigest()
    parts = [f"{query}: {seed}"]
    total = len(parts[0])
    i = int(seed[:8], 16)
    while total < size:
        word = WORDS[i % len(WORDS)]
        parts.append(word)
        total += len(word) + 1
        i = i * 1103515245 + 12345 & 0x7FFFFFFF
    return " ".join(parts)[:size]


def script_turns(session: str, steps: int, size: int, delay: float = 0) -> list[dict[str, Any]]:
    """`steps` model turns that each ask for one tool call, then an answer; each answered
    after `delay` seconds (the model's latency)."""
    turns: list[dict[str, Any]] = [
        {
            "text": f"Step {i}: looking it up.",
            "tool_calls": [{"name": TOOL_NAME, "input": {"query": f"{session} q{i}", "size": size}}],
            "usage": {"input_tokens": 100, "output_tokens": 20},
        }
        for i in range(1, steps + 1)
    ]
    turns.append(
        {"text": "Done: everything was looked up.", "usage": {"input_tokens": 100, "output_tokens": 10}}
    )
    if delay:
        for turn in turns:
            turn["delay"] = delay
    return turns


def prose(words: int, seed: int) -> str:
    """`words` words of filler text (a model's prose, for the paced turns)."""
    return " ".join(WORDS[(seed * 7 + i * 5) % len(WORDS)] for i in range(words))


def paced_turns(
    session: str, calls: int, words: int, pace: float, size: int = SMALL_OUTPUT
) -> list[dict[str, Any]]:
    """`calls` model turns at a model's pace: each writes `words` words, `pace` seconds a
    word (streamed or not, see devservers/fakemodel), and asks for one tool call, but the
    last, which answers. With `words=0` the same steps answer at once, without text."""
    turns: list[dict[str, Any]] = []
    for i in range(1, calls + 1):
        last = i == calls
        text = (
            ("Done: " if last else f"Step {i}: ") + prose(words - 2, i)
            if words
            else ("Done." if last else "")
        )
        turn: dict[str, Any] = {
            "text": text,
            "usage": {"input_tokens": 100, "output_tokens": max(10, words * 4 // 3)},
        }
        if words:
            turn["pace"] = pace
        if not last:
            turn["tool_calls"] = [{"name": TOOL_NAME, "input": {"query": f"{session} q{i}", "size": size}}]
        turns.append(turn)
    return turns


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(-(-q * len(ordered) // 100))))
    return ordered[rank - 1]


def intervals(times: list[float]) -> list[float]:
    ordered = sorted(times)
    return [b - a for a, b in itertools.pairwise(ordered)]


def spread(values: list[float]) -> tuple[float, float, float]:
    clean = [v for v in values if v == v]
    if not clean:
        return (float("nan"),) * 3  # type: ignore[return-value]
    return min(clean), statistics.median(clean), max(clean)
