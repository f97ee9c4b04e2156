"""The Temporal connection, from Temporal's own environment configuration.

`TEMPORAL_ADDRESS`, `TEMPORAL_NAMESPACE`, `TEMPORAL_API_KEY`, TLS settings and profiles
(`TEMPORAL_PROFILE`, `TEMPORAL_CONFIG_FILE`) work as in every Temporal tool; the default
is a local server at localhost:7233. `TEMPORAL_TASK_QUEUE` names the task queue.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from typing import ClassVar

from temporalio.client import Client
from temporalio.contrib.pydantic import PydanticPayloadConverter, pydantic_data_converter
from temporalio.converter import (
    DataConverter,
    DefaultFailureConverterWithEncodedAttributes,
    ExternalStorage,
    SerializationContext,
    StorageDriver,
)
from temporalio.envconfig import ClientConfigProfile

from infra.codec import EncryptionCodec
from infra.datadir import data_dir
from infra.errors import Unreachable
from infra.extras import check_settings
from infra.keyring import Keyring, keyring_from_env
from infra.otel import client_interceptors
from infra.payload_store import LocalFileDriver, s3_driver

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


def payload_driver() -> StorageDriver:
    """The external payload store: the shared S3 store of `AGENT_STORE_URL`, or the data directory."""
    url = os.environ.get("AGENT_STORE_URL", "").strip()
    return s3_driver(url) if url else LocalFileDriver(data_dir() / "payloads")


class SharedPydanticPayloadConverter(PydanticPayloadConverter):
    """The pydantic payload converter, built once per process.

    With external storage on, the SDK copies the data converter for every activity and
    every workflow task (to bind its storage context), and each copy builds a new payload
    converter: a new one starts with an empty type-adapter cache, so every typed decode
    built its pydantic TypeAdapter again (about 0.2 ms each, several a step). The
    converter holds no per-context state, and its cache is thread-safe.
    """

    _shared: ClassVar[SharedPydanticPayloadConverter | None] = None

    def __new__(cls) -> SharedPydanticPayloadConverter:
        if cls._shared is None:
            cls._shared = super().__new__(cls)
            PydanticPayloadConverter.__init__(cls._shared)
        return cls._shared

    def __init__(self) -> None:
        pass  # built once, in __new__

    def with_context(self, context: SerializationContext) -> PydanticPayloadConverter:  # type: ignore[override]
        # The base class would build "a new instance" with `type(self)()`: the shared one.
        converters = self.get_converters_with_context(context)
        if converters is None:
            return self
        fresh = PydanticPayloadConverter()
        fresh._set_converters(*converters)
        return fresh


def data_converter(keyring: Keyring | None = None) -> DataConverter:
    """Pydantic payloads; those above 256 KB go to external storage, not into history.

    With payload keys (`AGENT_PAYLOAD_KEYS` unless `keyring` is given) every payload and
    failure message is encrypted before it leaves the process.
    """
    keyring = keyring or keyring_from_env()
    storage = ExternalStorage(drivers=[payload_driver()], payload_size_threshold=LARGE_PAYLOAD_BYTES)
    base = dataclasses.replace(
        pydantic_data_converter, payload_converter_class=SharedPydanticPayloadConverter
    )
    if keyring is None:
        return dataclasses.replace(base, external_storage=storage)
    return dataclasses.replace(
        base,
        external_storage=storage,
        payload_codec=EncryptionCodec(keyring),
        failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
    )


async def connect(**overrides) -> Client:
    """Connect with the environment's configuration and the project's data converter.

    A server that is still starting ("Frontend is not healthy yet") is waited for, up to
    `STARTING_SERVER_WAIT`; any other failure is `Unreachable` at once. A malformed
    setting (`AGENT_PAYLOAD_KEYS`, `AGENT_STORE_URL`) raises ConfigError, one whose extra is
    not installed `MissingExtra` (infra/extras.py). With tracing on (infra/otel.py) the
    client carries the tracing interceptor, and so does every worker built from it.
    """
    check_settings()
    config = {"data_converter": None, **connect_config(), **overrides}
    config.setdefault("interceptors", client_interceptors())
    converter = config.pop("data_converter") or data_converter()
    deadline = asyncio.get_running_loop().time() + STARTING_SERVER_WAIT
    while True:
        try:
            return await Client.connect(**config, data_converter=converter)
        except RuntimeError as err:
            if "not healthy yet" in str(err) and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.2)
                continue
            raise Unreachable(f"cannot reach Temporal at {config['target_host']}: {err}") from err
