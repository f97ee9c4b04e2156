"""The benchmark tool as this project declares it: a regular activity, or a local one."""

from __future__ import annotations

from activities.tools import tool
from bench.common import SMALL_OUTPUT, lookup_text


def lookup(query: str, size: int = SMALL_OUTPUT) -> str:
    """Look up a query and return what is known about it."""
    return lookup_text(query, size)


REGULAR = [tool(policy="read_only", name="lookup")(lookup)]
LOCAL = [tool(policy="read_only", local=True, name="lookup")(lookup)]
