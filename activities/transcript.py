"""A content-addressed store of session transcripts, so history never re-records them.

A transcript is a chain of segments: each segment names its parent and holds the
messages added since. Its reference is the SHA-256 of both, so a reference always means
the same messages, whichever worker wrote it. The embedded store is a folder under the
data directory, shared by the workers of one machine. The workflow keeps every message
it has seen, so a missing segment is never fatal: the model activity reports it and the
workflow sends the whole transcript once instead.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from pathlib import Path
from typing import Any

from activities.data import write_once


class TranscriptMissing(LookupError):
    pass


class TranscriptStore:
    """The store, with the latest transcripts in memory.

    Each model call adds one entry to the cache; an entry is a list of references to
    message dicts that the session's earlier entries share, so it costs a few bytes per
    message. The cache must hold at least one entry per session in flight: below that,
    every call reads its session's chain of segments back from disk. The default matches
    the worker's cache of workflows (`max_cached_workflows`, 1000 by default).
    """

    def __init__(self, root: Path, cache_size: int = 1024):
        self._root = root
        self._cache: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()
        self._cache_size = cache_size

    def _path(self, ref: str) -> Path:
        return self._root / ref[:2] / f"{ref}.json"

    def load(self, ref: str | None) -> list[dict[str, Any]]:
        """All messages of the transcript `ref`, oldest first."""
        segments: list[list[dict[str, Any]]] = []
        base: list[dict[str, Any]] = []
        while ref is not None:
            if ref in self._cache:
                base = self._cache[ref]
                self._cache.move_to_end(ref)
                break
            try:
                segment = json.loads(self._path(ref).read_text())
            except (FileNotFoundError, json.JSONDecodeError) as err:
                raise TranscriptMissing(f"transcript segment {ref} is not in {self._root}") from err
            segments.append(segment["messages"])
            ref = segment["parent"]
        messages = list(base)
        for segment in reversed(segments):
            messages.extend(segment)
        return messages

    def extend(self, parent: str | None, messages: list[dict[str, Any]], full: list[dict[str, Any]]) -> str:
        """Store `messages` after `parent`; `full` is the whole resulting transcript, for the cache."""
        if not messages and parent is not None:
            return parent
        body = json.dumps({"parent": parent, "messages": messages}, sort_keys=True, ensure_ascii=False)
        ref = hashlib.sha256(body.encode()).hexdigest()
        write_once(self._path(ref), body.encode())
        self._cache[ref] = full
        self._cache.move_to_end(ref)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return ref

    def put_blob(self, text: str) -> str:
        """Store a text by its SHA-256; returns the hash."""
        digest = hashlib.sha256(text.encode()).hexdigest()
        write_once(self._root / "blobs" / digest[:2] / digest, text.encode())
        return digest

    def get_blob(self, digest: str) -> str:
        try:
            return (self._root / "blobs" / digest[:2] / digest).read_text(encoding="utf-8")
        except FileNotFoundError as err:
            raise TranscriptMissing(f"blob {digest} is not in {self._root}") from err

    def resolve(self, message: dict[str, Any]) -> dict[str, Any]:
        """A message with every `content_ref` replaced by the stored content."""
        blocks = message.get("content")
        if not isinstance(blocks, list) or not any("content_ref" in b for b in blocks):
            return message
        resolved = []
        for block in blocks:
            if "content_ref" in block:
                ref = block["content_ref"]
                block = {k: v for k, v in block.items() if k != "content_ref"}
                block["content"] = self.get_blob(ref)
            resolved.append(block)
        return {**message, "content": resolved}

    def note(self, key: str) -> str | None:
        """A derived text kept beside the transcripts (a summary), or None."""
        try:
            return (self._root / "notes" / f"{key}.txt").read_text()
        except FileNotFoundError:
            return None

    def save_note(self, key: str, text: str) -> None:
        # Keyed by what was summarised: the first summary written is the one later calls read.
        write_once(self._root / "notes" / f"{key}.txt", text.encode())
