"""The benchmark tool as this project declares it: with the defaults (read-only and short,
so a local activity), or kept a regular activity with `local=False`.

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


DEFAULT = [tool(policy="read_only", name="lookup")(lookup)]
REGULAR = [tool(policy="read_only", local=False, name="lookup")(lookup)]
