"""`@tool`: where a tool runs, resolved when it is declared, and the bound on one attempt."""

from __future__ import annotations

from datetime import timedelta

import pytest

from activities.tools import tool
from activities.wire import ToolSpec
from workflows import options


def _declare(**kwargs) -> ToolSpec:
    def lookup(query: str) -> str:
        """Look something up."""
        return query

    return tool(**kwargs)(lookup).spec


@pytest.mark.parametrize(
    ("kwargs", "local"),
    [
        ({}, True),  # idempotent, no approval, 10 s: the defaults run locally
        ({"policy": "read_only"}, True),
        ({"policy": "read_only", "timeout": 10}, True),
        ({"policy": "read_only", "timeout": 10.5}, False),  # too long to hold a workflow task
        ({"policy": "idempotent", "timeout": 600}, False),
        ({"policy": "read_only", "local": False}, False),  # opted out
        ({"policy": "at_most_once"}, False),
        ({"policy": "idempotent", "requires_approval": True}, False),
        ({"policy": "read_only", "timeout": 60, "local": True}, True),  # asked for
    ],
)
def test_unset_local_means_local_for_short_retry_safe_tools_without_approval(kwargs: dict, local: bool):
    assert _declare(**kwargs).local is local


def test_the_timeout_is_recorded_in_the_spec_and_bounds_each_attempt():
    regular = _declare(policy="read_only", timeout=90)
    assert regular.timeout_seconds == 90.0
    assert options.run_tool(regular).get("start_to_close_timeout") == timedelta(seconds=90)
    local = _declare(policy="read_only", timeout=4)
    assert options.run_local_tool(local).get("start_to_close_timeout") == timedelta(seconds=4)
    assert _declare().timeout_seconds == 10.0


def test_tool_lists_recorded_before_timeouts_keep_their_bounds():
    old = ToolSpec(name="lookup", description="d", input_schema={}, policy="read_only")
    assert options.run_tool(old).get("start_to_close_timeout") == options.TOOL_START_TO_CLOSE
    assert options.run_local_tool(old).get("start_to_close_timeout") == options.LOCAL_TOOL_TIMEOUT


@pytest.mark.parametrize(
    "kwargs",
    [
        {"policy": "at_most_once", "local": True},
        {"requires_approval": True, "local": True},
        {"timeout": 0},
        {"timeout": -1},
        {"timeout": float("inf")},
        {"timeout": "10"},
    ],
)
def test_impossible_declarations_are_refused(kwargs: dict):
    with pytest.raises(TypeError):
        _declare(**kwargs)
