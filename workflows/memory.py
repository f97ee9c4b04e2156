"""`MemoryWorkflow`: one user's memories in one scope, kept across sessions.

One workflow per scope (`memory/AGENT/USER`, activities/memory.py), waiting for updates
and answering queries; its history is the store. `remember` (a key and a text: the same
key replaces) and `forget` and `clear` are updates, whose validators refuse what would
pass the scope's bounds (`MAX_MEMORIES`, `MAX_BYTES`) with a sentence the model or the
person can act on; `memories` and `recall` are queries. After `CHANGES_PER_RUN` changes
the workflow continues as new with its memories, so its history stays short.

`rank` orders memories by relevance to a query without any network service: words in
common, weighted by how rare each is in the scope (a keyword ranking), the newest first
among equals.
"""

from __future__ import annotations

import math
import re
from collections import Counter

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.memory import (
        MAX_BYTES,
        MAX_MEMORIES,
        WORKFLOW_NAME,
        Memory,
        MemoryInput,
        MemoryQuery,
        MemoryWrite,
        size_of,
    )

CHANGES_PER_RUN = 200
WORD = re.compile(r"[^\W_]+", re.UNICODE)


@workflow.defn(name=WORKFLOW_NAME)
class MemoryWorkflow:
    @workflow.init
    def __init__(self, input: MemoryInput) -> None:
        self.memories = list(input.memories)
        self.changes = 0

    @workflow.run
    async def run(self, input: MemoryInput) -> None:
        await workflow.wait_condition(
            lambda: self.changes >= CHANGES_PER_RUN or workflow.info().is_continue_as_new_suggested()
        )
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(MemoryInput(memories=self.memories))

    @workflow.update(name="remember")
    def remember(self, write: MemoryWrite) -> str:
        kept = [m for m in self.memories if m.key != write.key]
        replaced = len(kept) != len(self.memories)
        self.memories = [
            *kept,
            Memory(key=write.key, text=write.text, at=workflow.now(), session_id=write.session_id),
        ]
        self.changes += 1
        return f"{'updated' if replaced else 'remembered'} as {write.key}"

    @remember.validator
    def _check_remember(self, write: MemoryWrite) -> None:
        kept = [m for m in self.memories if m.key != write.key]
        if len(kept) >= MAX_MEMORIES:
            raise ValueError(
                f"memory is full: {MAX_MEMORIES} memories; forget one you no longer need "
                "(recall shows the keys), or update one by its key"
            )
        new = Memory(key=write.key, text=write.text, at=workflow.now())
        if size_of([*kept, new]) > MAX_BYTES:
            raise ValueError(
                f"memory is full: at most {MAX_BYTES // 1024} KB; forget what you no longer need, or remember less"
            )

    @workflow.update(name="forget")
    def forget(self, key: str) -> bool:
        kept = [m for m in self.memories if m.key != key]
        gone = len(kept) != len(self.memories)
        self.memories = kept
        self.changes += 1
        return gone

    @workflow.update(name="clear")
    def clear(self) -> int:
        gone = len(self.memories)
        self.memories = []
        self.changes += 1
        return gone

    @workflow.query(name="memories")
    def list_memories(self) -> list[Memory]:
        return list(self.memories)

    @workflow.query(name="recall")
    def recall(self, query: MemoryQuery) -> list[Memory]:
        return rank(self.memories, query.query, query.limit)


def words(text: str) -> list[str]:
    return [w.casefold() for w in WORD.findall(text)]


def rank(memories: list[Memory], query: str, limit: int) -> list[Memory]:
    """The memories most relevant to `query`, best first (the newest first when it has no words)."""
    newest = sorted(memories, key=lambda m: m.at, reverse=True)
    wanted = set(words(query))
    if not wanted:
        return newest[:limit]
    bags = [(m, Counter(words(f"{m.key} {m.text}"))) for m in newest]
    holding = Counter(w for _, bag in bags for w in set(bag) if w in wanted)
    n = len(bags)

    def score(bag: Counter[str]) -> float:
        return sum(math.log(1 + n / holding[w]) * bag[w] / (bag[w] + 1) for w in wanted if bag[w])

    scored = [(score(bag), i, m) for i, (m, bag) in enumerate(bags)]
    found = sorted((s for s in scored if s[0] > 0), key=lambda s: (-s[0], s[1]))
    return [m for _, _, m in found[:limit]]
