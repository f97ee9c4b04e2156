"""The shared store on a real S3-compatible server (SeaweedFS): transcripts, tool-output
blobs and Temporal's external payloads written on one host and read on another, a local
read-through cache, and encrypted object bodies."""

from __future__ import annotations

from pathlib import Path

import boto3
import pytest

from activities.transcript import TranscriptMissing, TranscriptStore, open_store
from devservers.seaweed import SeaweedServer
from infra.connection import data_converter
from infra.keyring import UnknownKey, new_key
from infra.objects import CachedObjects, LocalObjects
from infra.s3 import S3Objects, parse_url
from tests.support.s3 import s3_env, s3_server  # noqa: F401  (fixtures)

MB = 1024 * 1024


def on_host(monkeypatch: pytest.MonkeyPatch, folder: Path) -> TranscriptStore:
    """The store a worker on another machine opens: its own data directory, the same bucket."""
    monkeypatch.setenv("AGENT_DATA_DIR", str(folder))
    return open_store()


def bucket_objects(server: SeaweedServer, env: dict[str, str]) -> dict[str, bytes]:
    location = parse_url(env["AGENT_STORE_URL"])
    s3 = boto3.client(
        "s3",
        endpoint_url=server.endpoint,
        aws_access_key_id=server.access_key,
        aws_secret_access_key=server.secret_key,
        region_name="us-east-1",
    )
    listed = s3.list_objects_v2(Bucket=location.bucket, Prefix=location.prefix + "/").get("Contents", [])
    return {o["Key"]: s3.get_object(Bucket=location.bucket, Key=o["Key"])["Body"].read() for o in listed}


class Counting:
    """Counts the requests that reach the S3 store."""

    def __init__(self, inner: S3Objects):
        self.inner, self.gets, self.puts = inner, 0, 0

    async def get(self, name: str) -> bytes | None:
        self.gets += 1
        return await self.inner.get(name)

    async def put(self, name: str, data: bytes) -> None:
        self.puts += 1
        await self.inner.put(name, data)

    def where(self) -> str:
        return self.inner.where()


async def test_a_transcript_written_on_one_host_is_read_on_another(s3_server, s3_env, monkeypatch, tmp_path):
    host_a = on_host(monkeypatch, tmp_path / "a")
    messages = [{"role": "user", "content": [{"type": "text", "text": f"step {i}"}]} for i in range(5)]
    ref = None
    for i, message in enumerate(messages):
        ref = await host_a.extend(ref, [message], messages[: i + 1])
    host_b = on_host(monkeypatch, tmp_path / "b")
    assert ref is not None and await host_b.load(ref) == messages
    keys = bucket_objects(s3_server, s3_env)
    prefix = parse_url(s3_env["AGENT_STORE_URL"]).prefix
    assert f"{prefix}/{ref[:2]}/{ref}.json" in keys and len(keys) == 5
    with pytest.raises(TranscriptMissing, match="s3://"):
        await host_b.load("0" * 64)


async def test_a_one_megabyte_blob_crosses_hosts_and_is_read_from_the_cache_after(
    s3_server, s3_env, monkeypatch, tmp_path
):
    text = "tool output " * (MB // 12)
    digest = await on_host(monkeypatch, tmp_path / "a").put_blob(text)
    location = parse_url(s3_env["AGENT_STORE_URL"])
    remote = Counting(S3Objects(location))
    host_b = TranscriptStore(CachedObjects(remote, LocalObjects(tmp_path / "b-cache")))
    assert await host_b.get_blob(digest) == text
    assert await host_b.get_blob(digest) == text
    assert remote.gets == 1  # the second read came from the local disk
    await host_b.put_blob(text)
    assert remote.puts == 0  # a name in the cache is known to be in the bucket


async def test_object_bodies_are_ciphertext_and_survive_a_key_rotation(
    s3_server, s3_env, monkeypatch, tmp_path
):
    old, new = new_key(), new_key()
    monkeypatch.setenv("AGENT_PAYLOAD_KEYS", f"k0:{old}")
    secret = "the launch code is 0000 " * 100
    store = on_host(monkeypatch, tmp_path / "a")
    ref = await store.extend(None, [{"role": "user", "content": secret}], [])
    digest = await store.put_blob(secret)
    stored = bucket_objects(s3_server, s3_env)
    cached = b"".join(p.read_bytes() for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert len(stored) == 2 and all(b"launch code" not in body for body in stored.values())
    assert b"launch code" not in cached

    monkeypatch.setenv("AGENT_PAYLOAD_KEYS", f"k1:{new},k0:{old}")
    rotated = on_host(monkeypatch, tmp_path / "b")
    assert (await rotated.load(ref))[0]["content"] == secret and await rotated.get_blob(digest) == secret

    monkeypatch.setenv("AGENT_PAYLOAD_KEYS", f"k1:{new}")
    with pytest.raises(UnknownKey, match="key id 'k0'"):
        await on_host(monkeypatch, tmp_path / "c").get_blob(digest)


async def test_external_payloads_go_under_the_prefix_and_any_host_reads_them(
    s3_server, s3_env, monkeypatch, tmp_path
):
    monkeypatch.setenv("AGENT_PAYLOAD_KEYS", f"k0:{new_key()}")
    monkeypatch.setenv("AGENT_DATA_DIR", str(tmp_path / "a"))
    big = "payload text " * 40_000  # 520 KB: above the 256 KB threshold
    encoded = await data_converter().encode([big])
    assert encoded[0].ByteSize() < 2000  # history keeps a reference
    stored = bucket_objects(s3_server, s3_env)
    prefix = parse_url(s3_env["AGENT_STORE_URL"]).prefix
    assert [k for k in stored if k.startswith(f"{prefix}/payloads/v0/")] and len(stored) == 1
    assert all(b"payload text" not in body for body in stored.values())
    monkeypatch.setenv("AGENT_DATA_DIR", str(tmp_path / "b"))
    assert await data_converter().decode(encoded, [str]) == [big]
    assert not list((tmp_path / "a").rglob("*.payload"))
