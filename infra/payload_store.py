"""Temporal external payload storage: on the local disk, or in the shared S3 store.

Payloads above 256 KB (a huge tool output, a long transcript carried across
continue-as-new) are written to `$AGENT_DATA_DIR/payloads/` and history keeps a small
reference. The folder must be shared by every worker and client of the deployment. With
`AGENT_STORE_URL=s3://BUCKET/PREFIX` they go to `PREFIX/payloads/` in that bucket
instead, through Temporal's `S3StorageDriver`, so any machine can read them.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from pathlib import Path

from temporalio.api.common.v1 import Payload
from temporalio.contrib.aws.s3driver import S3StorageDriver, S3StorageDriverClient
from temporalio.converter import (
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)

from infra.datadir import write_once
from infra.s3 import S3Location, S3Objects, parse_url


class LocalFileDriver(StorageDriver):
    """Content-addressed payload files in one folder."""

    def __init__(self, root: Path):
        self._root = root

    def name(self) -> str:
        return "local-file"

    def _path(self, digest: str) -> Path:
        return self._root / digest[:2] / f"{digest}.payload"

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        return await asyncio.to_thread(self._store_all, payloads)

    def _store_all(self, payloads: Sequence[Payload]) -> list[StorageDriverClaim]:
        claims = []
        for payload in payloads:
            data = payload.SerializeToString(deterministic=True)
            digest = hashlib.sha256(data).hexdigest()
            write_once(self._path(digest), data)
            claims.append(StorageDriverClaim(claim_data={"sha256": digest}))
        return claims

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        return await asyncio.to_thread(self._retrieve_all, claims)

    def _retrieve_all(self, claims: Sequence[StorageDriverClaim]) -> list[Payload]:
        payloads = []
        for claim in claims:
            digest = claim.claim_data["sha256"]
            try:
                data = self._path(digest).read_bytes()
            except FileNotFoundError:
                raise FileNotFoundError(
                    f"payload {digest} is not in {self._root}: this process must share the "
                    "data directory (AGENT_DATA_DIR) with the workers"
                ) from None
            payloads.append(Payload.FromString(data))
        return payloads


class _UnderPrefix(S3StorageDriverClient):
    """The S3 driver's objects, kept under the store's prefix (the driver's own key layout
    starts at the bucket's root)."""

    def __init__(self, objects: S3Objects, bucket: str):
        self._objects = objects
        self._bucket = bucket

    def _check(self, bucket: str) -> None:
        if bucket != self._bucket:
            raise ValueError(
                f"payload is in bucket {bucket!r}; this process's AGENT_STORE_URL names {self._bucket!r}"
            )

    async def put_object(self, *, bucket: str, key: str, data: bytes) -> None:
        self._check(bucket)
        await self._objects.put(key, data)

    async def object_exists(self, *, bucket: str, key: str) -> bool:
        self._check(bucket)
        return await self._objects.exists(key)

    async def get_object(self, *, bucket: str, key: str) -> bytes:
        self._check(bucket)
        data = await self._objects.get(key)
        if data is None:
            raise FileNotFoundError(f"payload {key} is not in {self._objects.where()}")
        return data

    def describe(self) -> dict[str, str]:
        return {"store": self._objects.where()}


def s3_driver(url: str) -> S3StorageDriver:
    """Temporal's S3 driver on the store of `url` (`s3://BUCKET/PREFIX`), under PREFIX/payloads."""
    location = parse_url(url)
    objects = S3Objects(S3Location(location.bucket, location.key("payloads")))
    return S3StorageDriver(client=_UnderPrefix(objects, location.bucket), bucket=location.bucket)
