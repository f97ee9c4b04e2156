"""The codec endpoint (`python -m infra.codec_server`) as a real process on 127.0.0.1:
Temporal's remote codec protocol, CORS for the UI's origin, the token rule."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2 as httpx
import pytest
from google.protobuf import json_format
from temporalio.api.common.v1 import Payloads

from devservers import processes
from devservers.temporal_server import free_port, port_open
from infra.connection import data_converter
from infra.keyring import new_key, parse_keys

ROOT = Path(__file__).resolve().parents[1]
KEYS = f"k0:{new_key()}"
UI = "http://localhost:8233"


def start(port: int, **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "infra.codec_server", "--port", str(port)],
        cwd=ROOT, env={**os.environ, "AGENT_PAYLOAD_KEYS": KEYS, **env},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip


@pytest.fixture
def codec_server(request) -> Iterator[str]:
    port = free_port()
    process = start(port, **getattr(request, "param", {}))
    assert process.stderr is not None  # stderr=PIPE
    try:
        deadline = time.monotonic() + 30
        while not port_open("127.0.0.1", port):
            assert process.poll() is None and time.monotonic() < deadline, process.stderr.read().decode()
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        processes.stop(process, grace=10)


async def encrypted(value: str, keys: str = KEYS) -> dict:
    payloads = await data_converter(parse_keys(keys)).encode([value])
    return json.loads(json_format.MessageToJson(Payloads(payloads=payloads)))


async def test_decode_and_encode_for_the_ui(codec_server: str):
    body = await encrypted("a secret goal")
    assert "a secret goal" not in json.dumps(body)
    headers = {"X-Namespace": "default", "Origin": UI, "Content-Type": "application/json"}
    decoded = httpx.post(f"{codec_server}/decode", json=body, headers=headers)
    assert decoded.status_code == 200 and decoded.headers["access-control-allow-origin"] == UI
    payload = decoded.json()["payloads"][0]
    assert base64.b64decode(payload["data"]) == b'"a secret goal"'
    assert base64.b64decode(payload["metadata"]["encoding"]) == b"json/plain"
    again = httpx.post(f"{codec_server}/encode", json=decoded.json(), headers=headers).json()
    assert base64.b64decode(again["payloads"][0]["metadata"]["encryption-key-id"]) == b"k0"
    preflight = httpx.options(
        f"{codec_server}/decode",
        headers={
            "Origin": UI,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type,x-namespace",
        },
    )
    assert preflight.status_code == 200 and preflight.headers["access-control-allow-origin"] == UI
    other = httpx.options(
        f"{codec_server}/decode",
        headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"},
    )
    assert "access-control-allow-origin" not in other.headers


async def test_a_payload_under_an_unknown_key_is_refused_by_name(codec_server: str):
    body = await encrypted("elsewhere", keys=f"far:{new_key()}")
    answer = httpx.post(f"{codec_server}/decode", json=body)
    assert answer.status_code == 422 and "key id 'far'" in answer.json()["message"]


@pytest.mark.parametrize("codec_server", [{"AGENT_CODEC_TOKEN": "s3cret-token"}], indirect=True)
async def test_with_a_token_only_its_bearer_is_served(codec_server: str):
    body = await encrypted("x")
    assert httpx.post(f"{codec_server}/decode", json=body).status_code == 401
    wrong = httpx.post(f"{codec_server}/decode", json=body, headers={"Authorization": "Bearer nope"})
    right = httpx.post(f"{codec_server}/decode", json=body, headers={"Authorization": "Bearer s3cret-token"})
    assert wrong.status_code == 401 and right.status_code == 200


def test_off_loopback_without_a_token_it_refuses_to_start():
    done = subprocess.run(
        [sys.executable, "-m", "infra.codec_server", "--host", "0.0.0.0", "--port", "1"],
        cwd=ROOT, env={**os.environ, "AGENT_PAYLOAD_KEYS": KEYS}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1 and done.stderr.strip() == (
        "error: the codec endpoint on 0.0.0.0 (not loopback) needs a bearer token in AGENT_CODEC_TOKEN"
    )
