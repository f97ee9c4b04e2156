"""The Temporal connection, from Temporal's own environment configuration.

`TEMPORAL_ADDRESS`, `TEMPORAL_NAMESPACE`, `TEMPORAL_API_KEY`, TLS settings and profiles
(`TEMPORAL_PROFILE`, `TEMPORAL_CONFIG_FILE`) work as in every Temporal tool; the default
is a local server at localhost:7233. `TEMPORAL_TASK_QUEUE` names the task queue.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter, ExternalStorage
from temporalio.envconfig import ClientConfigProfile

from activities.data import data_dir
from plumbing.errors import Unreachable
from plumbing.payload_store import LocalFileDriver
from plumbing.telemetry import client_interceptors

LARGE_PAYLOAD_BYTES = 256 * 1024
STARTING_SERVER_WAIT = 30.0

DEFAULT_ADDRESS = "localhost:7233"


def task_queue() -> str:
    return os.environ.get("TEMPORAL_TASK_QUEUE", "agent-loop")


def connect_config() -> dict:
    profile = ClientConfigProfile.load()
    config = dict(profile.to_client_connect_config())
    config.setdefault("target_host", DEFAULT_ADDRESS)
    if not config.get("target_host"):
        config["target_host"] = DEFAULT_ADDRESS
    config.setdefault("namespace", "default")
    return config


def address() -> str:
    return connect_config()["target_host"]


def data_converter() -> DataConverter:
    """Pydantic payloads; those above 256 KB go to external storage, not into history."""
    storage = ExternalStorage(
        drivers=[LocalFileDriver(data_dir() / "payloads")], payload_size_threshold=LARGE_PAYLOAD_BYTES
    )
    return dataclasses.replace(pydantic_data_converter, external_storage=storage)


async def connect(**overrides) -> Client:
    """Connect with the environment's configuration and the project's data converter.

    A server that is still starting ("Frontend is not healthy yet") is waited for, up to
    `STARTING_SERVER_WAIT`; any other failure is `Unreachable` at once. With tracing on
    (plumbing/telemetry.py) the client carries the tracing interceptor, and so does every
    worker built from it."""
    config = {**connect_config(), **overrides}
    config.setdefault("interceptors", client_interceptors())
    deadline = asyncio.get_running_loop().time() + STARTING_SERVER_WAIT
    while True:
        try:
            return await Client.connect(**config, data_converter=data_converter())
        except RuntimeError as err:
            if "not healthy yet" in str(err) and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.2)
                continue
            raise Unreachable(f"cannot reach Temporal at {config['target_host']}: {err}") from err
