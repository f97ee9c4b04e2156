"""Objects in an S3-compatible bucket (`AGENT_STORE_URL=s3://BUCKET/PREFIX`).

The client is aioboto3's, configured by the standard variables (`AWS_ENDPOINT_URL`,
`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, or any other source boto
reads). aioboto3 is imported only here, so the one-machine default does not need it.
"""

from __future__ import annotations

import asyncio
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast
from urllib.parse import urlparse

from infra.errors import ConfigError

if TYPE_CHECKING:
    from types_aiobotocore_s3.client import S3Client as BotoS3Client

ENV = "AGENT_STORE_URL"


@dataclass(frozen=True)
class S3Location:
    bucket: str
    prefix: str  # without a trailing slash; may be empty

    def key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


def parse_url(url: str) -> S3Location:
    """The bucket and prefix of an `s3://BUCKET/PREFIX` URL."""
    parsed = urlparse(url)
    if parsed.scheme != "s3" or not parsed.netloc or parsed.query or parsed.fragment:
        raise ConfigError(f"{ENV} must look like s3://BUCKET/PREFIX, not {url!r}")
    return S3Location(parsed.netloc, parsed.path.strip("/"))


class S3Client:
    """One aioboto3 client per event loop, opened on first use and kept for the process."""

    def __init__(self) -> None:
        self._clients: dict[int, BotoS3Client] = {}
        self._stacks: list[AsyncExitStack] = []

    async def get(self) -> BotoS3Client:
        loop = id(asyncio.get_running_loop())
        client = self._clients.get(loop)
        if client is None:
            import aioboto3

            stack = AsyncExitStack()
            # aioboto3 has no types of its own: its client is the one types-aiobotocore-s3 describes.
            opened = cast("AbstractAsyncContextManager[BotoS3Client]", aioboto3.Session().client("s3"))
            client = await stack.enter_async_context(opened)
            self._stacks.append(stack)  # never closed: the client lives as long as the process
            self._clients[loop] = client
        return client


class S3Objects:
    """Objects under a prefix of a bucket."""

    def __init__(self, location: S3Location, client: S3Client | None = None):
        self._location = location
        self._client = client or S3Client()

    async def get(self, name: str) -> bytes | None:
        client = await self._client.get()
        try:
            response = await client.get_object(Bucket=self._location.bucket, Key=self._location.key(name))
        except client.exceptions.NoSuchKey:
            return None
        async with response["Body"] as body:
            return await body.read()

    async def put(self, name: str, data: bytes) -> None:
        # No existence check first: the name is the content's hash, so writing it again
        # writes the same thing, and one request is cheaper than two.
        client = await self._client.get()
        await client.put_object(Bucket=self._location.bucket, Key=self._location.key(name), Body=data)

    async def exists(self, name: str) -> bool:
        client = await self._client.get()
        try:
            await client.head_object(Bucket=self._location.bucket, Key=self._location.key(name))
        except client.exceptions.ClientError as err:
            if err.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise
        return True

    def where(self) -> str:
        return str(self._location)
