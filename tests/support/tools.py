"""Tools for tests: the example tools plus slow and failing ones to crash, cancel and time."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Annotated

from pydantic import Field

from activities.tools import ToolContext, tool
from examples.example_tools import TOOLS as EXAMPLE_TOOLS
from infra.datadir import data_dir, record_effect


@tool(policy="at_most_once", timeout=150)
async def slow_charge(
    amount: Annotated[int, Field(ge=1)], seconds: Annotated[float, Field(ge=0, le=120)], ctx: ToolContext
) -> str:
    """Charge the user's card, slowly. At most once: never run twice."""
    record_effect("slow_charge", ctx.session_id, ctx.idempotency_key, {"amount": amount, "seconds": seconds})
    await asyncio.sleep(seconds)
    return f"charged {amount}"


@tool(policy="idempotent", timeout=150)
async def slow_upsert(key: str, seconds: Annotated[float, Field(ge=0, le=120)], ctx: ToolContext) -> str:
    """Write a record, slowly. Idempotent: safe to run again with the same idempotency key."""
    record_effect("slow_upsert", ctx.session_id, ctx.idempotency_key, {"key": key, "seconds": seconds})
    await asyncio.sleep(seconds)
    return f"upserted {key}"


@tool(policy="idempotent")
async def quick_upsert(key: str, seconds: Annotated[float, Field(ge=0, le=9)], ctx: ToolContext) -> str:
    """Write a record within seconds. Idempotent, with the default timeout: a local activity."""
    record_effect("quick_upsert", ctx.session_id, ctx.idempotency_key, {"key": key, "seconds": seconds})
    await asyncio.sleep(seconds)
    return f"upserted {key}"


@tool(policy="read_only", timeout=330)
async def wait_for_cancel(seconds: Annotated[float, Field(ge=0, le=300)], ctx: ToolContext) -> str:
    """Wait, heartbeating; writes a marker file if it sees the cancellation."""
    try:
        for _ in range(int(seconds * 10)):
            ctx.heartbeat()
            await asyncio.sleep(0.1)
    except asyncio.CancelledError:
        (data_dir() / f"cancelled-{ctx.tool_use_id}").write_text(str(os.getpid()))
        raise
    return "waited"


@tool(policy="read_only", timeout=120)
async def long_read(seconds: Annotated[float, Field(ge=0, le=110)], ctx: ToolContext) -> str:
    """Read for this long without a heartbeat; writes when it was stopped, if it was."""
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        (data_dir() / f"stopped-{ctx.tool_use_id}").write_text(f"{time.time()} {ctx.cancelled}")
        raise
    return "read it all"


@tool(policy="read_only", timeout=120)
def long_scan(seconds: Annotated[float, Field(ge=0, le=110)], ctx: ToolContext) -> str:
    """Scan for this long in a thread, a step at a time, until `ctx.cancelled` says stop."""
    began = time.monotonic()
    while time.monotonic() - began < seconds:
        if ctx.cancelled:
            (data_dir() / f"stopped-{ctx.tool_use_id}").write_text(f"{time.time()} True")
            return "stopped early"
        time.sleep(0.02)
    return "scanned it all"


@tool(policy="read_only")
def explode(message: str) -> str:
    """Always fails with the given message."""
    raise RuntimeError(message)


@tool(policy="read_only")
def big_output(chars: Annotated[int, Field(ge=0, le=10_000_000)]) -> str:
    """Return `chars` characters of text."""
    return "x" * chars


@tool(policy="read_only")
def echo_text(text: str, repeat: Annotated[int, Field(ge=1, le=1_000_000)] = 1) -> str:
    """Return "out:" and the text, `repeat` times: an output that holds a known string."""
    return f"out:{text}" * repeat


@tool(policy="read_only")
def whoami(user_id: str | None = None, ctx: ToolContext = None) -> str:  # type: ignore[assignment]
    """Return the user this session acts for. A user_id argument is ignored."""
    return f"acting for {ctx.user_id}"


TOOLS = [
    *EXAMPLE_TOOLS,
    slow_charge,
    slow_upsert,
    quick_upsert,
    wait_for_cancel,
    long_read,
    long_scan,
    explode,
    big_output,
    echo_text,
    whoami,
]
