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
