"""Model strings: `provider:model`, or a bare name, which is Anthropic's.

`anthropic:claude-sonnet-4-5` names Anthropic's `claude-sonnet-4-5`, `openai:gpt-4.1-mini`
OpenAI's `gpt-4.1-mini`; a bare name is Anthropic's, so sessions started before
prefixes existed keep working. A prefix is letters, digits, `-` and `_` before the first
colon (a name with a dot before its colon, like a Bedrock model id, stays bare).

Only the spelling lives here, so the price table and the command line's help read it
without importing any provider's SDK; which providers exist is `activities.providers`'
to say (`FACTORIES`).
"""

from __future__ import annotations

import re

DEFAULT_PROVIDER = "anthropic"
DEFAULT_MODEL = "claude-sonnet-4-6"

_PREFIX = re.compile(r"([A-Za-z][A-Za-z0-9_-]*):(.+)")


def split_prefix(model: str) -> tuple[str, str]:
    """The provider's name as written (the default one for a bare name) and the model's own name."""
    match = _PREFIX.fullmatch(model)
    if match is None:
        return DEFAULT_PROVIDER, model
    name, bare = match.groups()
    return name, bare


# Claude's model names: `claude-sonnet-4-5`, `claude-opus-4-1-20250805`, and before the 4
# family `claude-3-7-sonnet-20250219`.
_CLAUDE = re.compile(
    r"claude-(?:(?:opus|sonnet|haiku)-(\d+)(?:-(\d))?|(\d+)(?:-(\d))?-(?:opus|sonnet|haiku))(?:-\d{8})?(?:[-@].*)?"
)
FIRST_ADAPTIVE = (4, 6)  # Claude 4.6 takes adaptive thinking (and still a budget)
# From Claude 4.7 on: adaptive thinking only (a budget is refused), and no sampling settings.
ONLY_ADAPTIVE = (4, 7)
ONE_OF_TEMPERATURE_AND_TOP_P = (4, 5)  # from Claude 4.5 on, temperature or top_p, not both


def claude_version(model: str) -> tuple[int, int] | None:
    """(major, minor) of a Claude model name (bare, or after `anthropic:`), None for others."""
    provider, name = split_prefix(model)
    if provider != DEFAULT_PROVIDER:
        return None
    match = _CLAUDE.fullmatch(name)
    if match is None:
        return None
    major, minor, old_major, old_minor = match.groups()
    if major is not None:
        return int(major), int(minor or 0)
    return int(old_major), int(old_minor or 0)


def takes_adaptive_thinking(model: str) -> bool:
    version = claude_version(model)
    return version is not None and version >= FIRST_ADAPTIVE


def takes_only_adaptive_thinking(model: str) -> bool:
    version = claude_version(model)
    return version is not None and version >= ONLY_ADAPTIVE


def refuses_sampling(model: str) -> bool:
    """Whether the model refuses `temperature` and `top_p` altogether."""
    return takes_only_adaptive_thinking(model)


def refuses_temperature_with_top_p(model: str) -> bool:
    version = claude_version(model)
    return version is not None and version >= ONE_OF_TEMPERATURE_AND_TOP_P
