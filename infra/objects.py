"""Where the transcript store keeps its objects: a local folder, or an S3 bucket behind a
local read-through cache, optionally encrypted.

Every object is named by a hash of what it holds (a transcript segment, a tool output,
a summary keyed by what it summarises) and written once. Two writers of one name write
the same content, so many workers on many machines need no locking, and a copy in a
cache can never be stale: that is why a cache on local disk in front of S3 is safe.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from infra.datadir import write_once
from infra.keyring import Keyring

SEALED = b"AGK1"  # the header of an encrypted object: then the key id's length and the id


class Objects(Protocol):
    """Write-once objects by name."""

    async def get(self, name: str) -> bytes | None: ...

    async def put(self, name: str, data: bytes) -> None: ...

    def where(self) -> str: ...


class LocalObjects:
    """Files in a folder, one per object. Reads and writes are small and local: they stay
    on the event loop, as a thread hop would cost more than the read."""

    def __init__(self, root: Path):
        self._root = root

    def _path(self, name: str) -> Path:
        return self._root / name

    async def get(self, name: str) -> bytes | None:
        try:
            return self._path(name).read_bytes()
        except FileNotFoundError:
            return None

    async def put(self, name: str, data: bytes) -> None:
        write_once(self._path(name), data)

    def has(self, name: str) -> bool:
        return self._path(name).exists()

    def where(self) -> str:
        return str(self._root)


class CachedObjects:
    """A remote store with a local copy of everything read or written through it.

    An object is put in the cache only after the remote store holds it, so a name in the
    cache means the remote has it too, and a repeated write costs no request.
    """

    def __init__(self, remote: Objects, cache: LocalObjects):
        self._remote = remote
        self._cache = cache

    async def get(self, name: str) -> bytes | None:
        data = await self._cache.get(name)
        if data is None:
            data = await self._remote.get(name)
            if data is not None:
                await self._cache.put(name, data)
        return data

    async def put(self, name: str, data: bytes) -> None:
        if self._cache.has(name):
            return
        await self._remote.put(name, data)
        await self._cache.put(name, data)

    def where(self) -> str:
        return self._remote.where()


class SealedObjects:
    """Objects encrypted with the payload keys; an object written before encryption was
    turned on is still read as it is."""

    def __init__(self, inner: Objects, keyring: Keyring):
        self._inner = inner
        self._keyring = keyring

    async def get(self, name: str) -> bytes | None:
        data = await self._inner.get(name)
        if data is None or not data.startswith(SEALED):
            return data
        id_len = data[len(SEALED)]
        start = len(SEALED) + 1
        key_id = data[start : start + id_len].decode()
        # Decryption of a megabyte takes about a millisecond: not worth a thread.
        return self._keyring.decrypt(key_id, data[start + id_len :])

    async def put(self, name: str, data: bytes) -> None:
        key_id, sealed = self._keyring.encrypt(data)
        await self._inner.put(name, SEALED + bytes([len(key_id)]) + key_id.encode() + sealed)

    def where(self) -> str:
        return self._inner.where()
