"""The benchmark tool as this project declares it: a regular activity, or a local one.

With `BENCH_TOOL_LOG` set (the scale scenario), each call appends the time it returns and
its query (which names the session and the step) to that file: the start of the
orchestration gap, from a tool's result to the session's next model request.
"""

from __future__ import annotations

import os
import time

from activities.tools import tool
from bench.common import SMALL_OUTPUT, lookup_text

TOOL_LOG = os.environ.get("BENCH_TOOL_LOG")


def lookup(query: str, size: int = SMALL_OUTPUT) -> str:
    """Look up a query and return what is known about it."""
    text = lookup_text(query, size)
    if TOOL_LOG:
        with open(TOOL_LOG, "a") as log:
            log.write(f"{time.time()} {query}\n")
    return text


REGULAR = [tool(policy="read_only", name="lookup")(lookup)]
LOCAL = [tool(policy="read_only", local=True, name="lookup")(lookup)]
