"""How a session is named in a line of text: its summary and details in the Temporal UI
(set at start by `sessions.control.start`), and values shortened for a terminal or a prompt."""

from __future__ import annotations

import json
from typing import Any

from workflows.contract import SessionInput

SUMMARY_CHARS = 200


def shorten(value: Any, limit: int = 120) -> str:
    """`value` (text, or any JSON value) on one line of at most `limit` characters."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def summary(session: SessionInput) -> str:
    """The workflow's static summary in the Temporal UI: the goal."""
    return shorten(session.goal, SUMMARY_CHARS)


def details(session: SessionInput) -> str:
    """The workflow's static details in the Temporal UI."""
    limits = session.limits
    lines = [
        *([f"**agent** {session.agent.name}"] if session.agent else []),
        f"**model** {session.model} (prompt {session.prompt_version})"
        + (f", falling back to {', '.join(session.fallback_models)}" if session.fallback_models else ""),
        f"**user** {session.user_id}",
        f"**limits** {limits.max_steps} steps, {limits.token_budget} tokens, "
        f"{limits.timeout_seconds:g}s" + (f", ${limits.cost_budget_usd:g}" if limits.cost_budget_usd else ""),
        f"**tools** {', '.join(session.tools) if session.tools is not None else 'all of the worker'}",
    ]
    if session.model_settings is not None:
        chosen = session.model_settings.model_dump(exclude_defaults=True)
        lines.append("**model settings** " + ", ".join(f"{k} {v}" for k, v in chosen.items()))
    if session.forked_from is not None:
        lines.append(
            f"**forked from** {session.forked_from.session_id} after step {session.forked_from.step}"
        )
    return "\n".join(lines)
