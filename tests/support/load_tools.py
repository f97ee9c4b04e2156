"""Tools for the load test: the test tools plus a synchronous one that keeps a core busy."""

from __future__ import annotations

import time
from typing import Annotated

from pydantic import Field

from activities.tools import ToolContext, tool
from infra.datadir import record_effect
from tests.support.tools import TOOLS as TEST_TOOLS


@tool(policy="at_most_once", timeout=150)
def crunch(seconds: Annotated[float, Field(ge=0, le=120)], ctx: ToolContext) -> str:
    """Compute for this many seconds without a pause (pure Python, in its thread). At most once."""
    record_effect("crunch", ctx.session_id, ctx.idempotency_key, {"seconds": seconds})
    began, rounds = time.monotonic(), 0
    while time.monotonic() - began < seconds:
        rounds += sum(i * i for i in range(1000)) > 0
    return f"crunched {rounds} rounds"


TOOLS = [*TEST_TOOLS, crunch]
