"""A read that Temporal is too slow for is tried again within its deadline, then answered
as busy (sessions.reading.patiently); anything else is not retried."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.service import RPCError, RPCStatusCode

from infra.errors import Busy, SessionNotFound
from sessions.reading import patiently


def slow(times: int, status: RPCStatusCode = RPCStatusCode.CANCELLED):
    """A read that fails `times` times as a loaded server does ("Timeout expired"), then answers."""
    calls = []

    async def read() -> str:
        calls.append(1)
        if len(calls) <= times:
            raise RPCError("Timeout expired", status, b"")
        return "answered"

    return read, calls


async def test_a_read_that_times_out_is_tried_again_and_answers():
    read, calls = slow(2)
    assert await patiently(read, "session s", within=5) == "answered"
    assert len(calls) == 3


async def test_past_its_deadline_a_read_is_busy_with_a_retry_after():
    read, calls = slow(1000, RPCStatusCode.DEADLINE_EXCEEDED)
    with pytest.raises(Busy, match=r"^busy: session s did not answer within 1 s .*retry in 2 s") as raised:
        await patiently(read, "session s", within=1)
    assert raised.value.retry_after == 2 and len(calls) >= 2


async def test_a_read_still_running_at_its_deadline_is_busy():
    async def hangs() -> str:
        await asyncio.sleep(60)
        return "never"

    with pytest.raises(Busy):
        await patiently(hangs, "session s", within=0.3)


@pytest.mark.parametrize(
    "error", [SessionNotFound("s"), RPCError("bad", RPCStatusCode.INVALID_ARGUMENT, b"")]
)
async def test_an_answer_that_is_not_slowness_is_not_retried(error: Exception):
    calls = []

    async def read() -> str:
        calls.append(1)
        raise error

    with pytest.raises(type(error)):
        await patiently(read, "session s", within=5)
    assert len(calls) == 1


def test_the_api_answers_busy_with_503_and_retry_after():
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from service import http_errors

    app = FastAPI()
    http_errors.install(app)

    @app.get("/busy")
    async def busy() -> None:
        raise Busy("busy: session s did not answer within 25 s (Timeout expired); retry in 2 s", 2)

    @app.get("/temporal")
    async def temporal() -> None:
        raise RPCError("Timeout expired", RPCStatusCode.CANCELLED, b"")

    with TestClient(app) as http:
        for path in ("/busy", "/temporal"):
            answered = http.get(path)
            assert answered.status_code == 503 and answered.headers["Retry-After"] == "2", answered.text
            assert answered.json()["error"]["message"]
