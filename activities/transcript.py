"""A content-addressed store of session transcripts, so history never re-records them.

A transcript is a chain of segments: each segment names its parent and holds the
messages added since. Its reference is the SHA-256 of both, so a reference always means
the same messages, whichever worker wrote it. Tool outputs too long for history,
summaries, and the parts of long sessions that each run hands to the store instead of to
the next (workflows/archive.py) live beside them. The store is a folder under the data directory, shared by
the workers of one machine, or with `AGENT_STORE_URL=s3://BUCKET/PREFIX` an S3 bucket
shared by every machine, read through a cache on local disk (infra/objects.py).
With `AGENT_PAYLOAD_KEYS` set, every object is encrypted. The workflow keeps every
message it has seen, so a missing segment is never fatal: the model activity reports it
and the workflow sends the whole transcript once instead.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from activities.context import Tail
from infra.datadir import data_dir
from infra.keyring import Keyring, keyring_from_env
from infra.objects import CachedObjects, LocalObjects, Objects, SealedObjects


class TranscriptMissing(LookupError):
    pass


def open_objects(url: str | None = None, keyring: Keyring | None = None) -> Objects:
    """The objects of `AGENT_STORE_URL` (default: the data directory), sealed with `keyring`."""
    objects: Objects
    if url:
        from infra.s3 import S3Objects, parse_url

        location = parse_url(url)
        cache = LocalObjects(data_dir() / "store-cache" / location.bucket / (location.prefix or "_"))
        objects = CachedObjects(S3Objects(location), cache)
    else:
        objects = LocalObjects(data_dir() / "transcripts")
    return SealedObjects(objects, keyring) if keyring is not None else objects


def open_store() -> TranscriptStore:
    """The store this process's environment configures (`AGENT_STORE_URL`, `AGENT_PAYLOAD_KEYS`)."""
    return TranscriptStore(
        open_objects(os.environ.get("AGENT_STORE_URL", "").strip() or None, keyring_from_env())
    )


class TranscriptStore:
    """The store, with the latest transcripts' tails in memory.

    Each model call adds one entry to the cache: the transcript's `Tail`
    (activities/context.py), the goal and the recent messages a fit within the call's
    context budget can send, sharing its message dicts with the session's earlier entries;
    so a long session costs about its context budget here, not its length. A session
    keeps two entries (its latest transcript and the one before). The cache must hold at
    least one entry per session in flight: below that, every call reads its session's
    chain of segments back from the objects. The default matches the worker's cache of
    workflows (`max_cached_workflows`, 1000 by default).
    """

    def __init__(self, objects: Objects | Path, cache_size: int = 1024):
        self._objects = LocalObjects(objects) if isinstance(objects, Path) else objects
        self._cache: OrderedDict[str, Tail] = OrderedDict()
        self._cache_size = cache_size
        self._parents: dict[str, str | None] = {}  # of the cached entries

    async def _read(self, name: str, what: str) -> bytes:
        data = await self._objects.get(name)
        if data is None:
            raise TranscriptMissing(f"{what} is not in {self._objects.where()}")
        return data

    async def _walk(
        self, ref: str | None, enough: Callable[[Tail], bool]
    ) -> tuple[Tail, list[dict[str, Any]]]:
        """The latest cached tail of `ref`'s chain that is `enough` (or an empty one), and
        the messages stored after it, oldest first."""
        segments: list[list[dict[str, Any]]] = []
        base = Tail()
        while ref is not None:
            cached = self._cache.get(ref)
            if cached is not None and enough(cached):
                base = cached
                self._cache.move_to_end(ref)
                break
            try:
                segment = json.loads(await self._read(f"{ref[:2]}/{ref}.json", f"transcript segment {ref}"))
            except json.JSONDecodeError as err:
                raise TranscriptMissing(f"transcript segment {ref} is unreadable") from err
            segments.append(segment["messages"])
            ref = segment["parent"]
        return base, [m for segment in reversed(segments) for m in segment]

    def cached(self, ref: str) -> Tail | None:
        """What this store keeps in memory of the transcript `ref`, if anything."""
        return self._cache.get(ref)

    async def load(self, ref: str | None) -> list[dict[str, Any]]:
        """All messages of the transcript `ref`, oldest first."""
        base, after = await self._walk(ref, lambda tail: tail.whole)
        return [*base.messages, *after]

    async def load_tail(self, ref: str | None, keep: int) -> Tail:
        """The tail of the transcript `ref` that a fit within `keep` tokens can send."""
        base, after = await self._walk(ref, lambda tail: tail.covers is None or tail.covers >= keep)
        return base.extended(after).trimmed(keep) if after else base

    async def extend(
        self, parent: str | None, messages: list[dict[str, Any]], full: Tail | list[dict[str, Any]]
    ) -> str:
        """Store `messages` after `parent`; `full` is the resulting transcript (or its
        tail), for the cache."""
        if not messages and parent is not None:
            return parent
        body = json.dumps({"parent": parent, "messages": messages}, sort_keys=True, ensure_ascii=False)
        ref = hashlib.sha256(body.encode()).hexdigest()
        await self._objects.put(f"{ref[:2]}/{ref}.json", body.encode())
        self._cache[ref] = full if isinstance(full, Tail) else Tail.of(full)
        self._cache.move_to_end(ref)
        # A transcript keeps its latest entry and the one before (a retried call reads that).
        self._parents[ref] = parent
        if parent is not None and (grand := self._parents.pop(parent, None)) is not None:
            self._cache.pop(grand, None)
            self._parents.pop(grand, None)
        while len(self._cache) > self._cache_size:
            evicted, _ = self._cache.popitem(last=False)
            self._parents.pop(evicted, None)
        return ref

    async def put_blob(self, text: str) -> str:
        """Store a text by its SHA-256; returns the hash."""
        digest = hashlib.sha256(text.encode()).hexdigest()
        await self._objects.put(f"blobs/{digest[:2]}/{digest}", text.encode())
        return digest

    async def get_blob(self, digest: str) -> str:
        return (await self._read(f"blobs/{digest[:2]}/{digest}", f"blob {digest}")).decode("utf-8")

    async def resolve(self, message: dict[str, Any]) -> dict[str, Any]:
        """A message with every `content_ref` replaced by the stored content."""
        content = message.get("content")
        blocks = cast("list[Any]", content) if isinstance(content, list) else []
        if not any("content_ref" in b for b in blocks):
            return message
        resolved: list[Any] = []
        for block in blocks:
            if "content_ref" in block:
                ref = block["content_ref"]
                block = {k: v for k, v in block.items() if k != "content_ref"}
                block["content"] = await self.get_blob(ref)
            resolved.append(block)
        return {**message, "content": resolved}

    async def put_attachment(self, data: bytes) -> str:
        """Store a file given with a goal by its SHA-256 (sealed like every object); returns the hash."""
        digest = hashlib.sha256(data).hexdigest()
        await self._objects.put(f"attachments/{digest[:2]}/{digest}", data)
        return digest

    async def get_attachment(self, digest: str) -> bytes:
        return await self._read(f"attachments/{digest[:2]}/{digest}", f"attachment {digest}")

    async def with_attachments(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The messages with each stored attachment as the block a request carries: an
        image or a PDF as base64, a text file as a text block."""
        if not any(_stored(b) for m in messages for b in _blocks(m)):
            return messages
        return [
            {**m, "content": [await self._attachment_block(b) if _stored(b) else b for b in _blocks(m)]}
            if any(_stored(b) for b in _blocks(m)) else m
            for m in messages
        ]  # fmt: skip

    async def _attachment_block(self, block: dict[str, Any]) -> dict[str, Any]:
        source = block["source"]
        data = await self.get_attachment(source["ref"])
        if source["media_type"] == "text/plain":
            return {"type": "text", "text": f"[attached file {source['name']}]\n{data.decode('utf-8')}"}
        encoded = {
            "type": "base64",
            "media_type": source["media_type"],
            "data": base64.b64encode(data).decode(),
        }
        extra = {k: v for k, v in block.items() if k not in ("type", "source")}
        if block["type"] == "document":
            extra.setdefault("title", source["name"])
        return {"type": block["type"], "source": encoded, **extra}

    async def put_archive(self, part: dict[str, Any]) -> str:
        """Store one archived part of a session (`parent` names the one before); its hash."""
        body = json.dumps(part, sort_keys=True, ensure_ascii=False).encode()
        ref = hashlib.sha256(body).hexdigest()
        await self._objects.put(f"archive/{ref[:2]}/{ref}.json", body)
        return ref

    async def load_archive(self, ref: str | None) -> list[dict[str, Any]]:
        """The archived parts of a session, oldest first, from its newest part's `ref`."""
        parts: list[dict[str, Any]] = []
        while ref is not None:
            data = await self._read(f"archive/{ref[:2]}/{ref}.json", f"archived part {ref}")
            try:
                part = json.loads(data)
            except json.JSONDecodeError as err:
                raise TranscriptMissing(f"archived part {ref} is unreadable") from err
            parts.append(part)
            ref = part.get("parent")
        parts.reverse()
        return parts

    async def note(self, key: str) -> str | None:
        """A derived text kept beside the transcripts (a summary), or None."""
        data = await self._objects.get(f"notes/{key}.txt")
        return None if data is None else data.decode("utf-8")

    async def save_note(self, key: str, text: str) -> None:
        # Keyed by what was summarised: the first summary written is the one later calls read.
        await self._objects.put(f"notes/{key}.txt", text.encode())


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return cast("list[dict[str, Any]]", content) if isinstance(content, list) else []


def _stored(block: dict[str, Any]) -> bool:
    source = block.get("source")
    return (
        block.get("type") in ("image", "document")
        and isinstance(source, dict)
        and cast("dict[str, Any]", source).get("type") == "stored"
    )
