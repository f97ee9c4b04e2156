"""The workflow ids the system makes itself, in one place: where they are made, and where
a start is checked (`is_reserved`), so that no start at any door takes one.

    a session's sub-agent       SESSION.sub-N        (workflows/subagents.py)
    a session's notification    SESSION.notify-N     (workflows/notify.py)
    a fork's default id         SESSION.fork-XXXXXX  (6 hex digits; cli/commands.py)
    a memory scope              memory/AGENT/USER    (activities/memory.py)
    a schedule's run            NAME-TIME            (Temporal appends the scheduled time,
                                                      RFC 3339, to the schedule's workflow id)

A sub-agent, a notification or a scheduled run that found its id taken would fail (or be
dropped); reserving the shapes means only the system ever makes such an id. This module
is plain string work: the workflow sandbox imports it.
"""

from __future__ import annotations

import re

MEMORY_PREFIX = "memory/"
SUBAGENT = re.compile(r"\.sub-\d+$")
NOTIFICATION = re.compile(r"\.notify-\d+$")
FORK = re.compile(r"\.fork-[0-9a-f]{6}$")
SCHEDULED_RUN = re.compile(r"-\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})$")
SHAPES = (
    (SUBAGENT, "a session's sub-agents (ID.sub-N)"),
    (NOTIFICATION, "a session's notifications (ID.notify-N)"),
    (FORK, "forks (ID.fork- and 6 hex digits)"),
    (SCHEDULED_RUN, "scheduled runs (NAME-YYYY-MM-DDTHH:MM:SSZ)"),
)


def subagent(session_id: str, n: int) -> str:
    """The id of a session's n-th sub-agent run."""
    return f"{session_id}.sub-{n}"


def notification(session_id: str, n: int) -> str:
    """The id of the workflow that delivers a session's n-th notification."""
    return f"{session_id}.notify-{n}"


def fork(session_id: str, suffix: str) -> str:
    """A fork's default id: the source's, and 6 hex digits (`suffix`)."""
    return f"{session_id}.fork-{suffix}"


def memory(user: str, agent: str | None) -> str:
    """The memory workflow of a user's scope: per agent, or the user's own (`-`)."""
    return f"{MEMORY_PREFIX}{agent or '-'}/{user}"


def reserved_for(session_id: str) -> str | None:
    """What the id's shape is reserved for, or None when a start may take it."""
    if session_id.startswith(MEMORY_PREFIX):
        return f"memories ({MEMORY_PREFIX}...)"
    return next((what for shape, what in SHAPES if shape.search(session_id)), None)


def is_reserved(session_id: str) -> bool:
    """Whether the id has the shape of an id the system makes (no start may take it)."""
    return reserved_for(session_id) is not None
