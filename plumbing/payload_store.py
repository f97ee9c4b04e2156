"""Temporal external payload storage on the local disk.

Payloads above 256 KB (a huge tool output, a long transcript carried across
continue-as-new) are written to `$AGENT_DATA_DIR/payloads/` and history keeps a small
reference. The folder must be shared by every worker and client of the deployment; for
several machines use a shared store instead, for example S3 through
`temporalio.contrib.aws.s3driver.S3StorageDriver`.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from pathlib import Path

from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)

from activities.data import write_once


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
