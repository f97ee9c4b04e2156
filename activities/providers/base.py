"""What a model provider is to the model activity: one call in, one normalised turn out.

A provider owns its wire format, its client and its errors. Everything it hands back is
the project's own: neutral content blocks, a normalised stop reason and usage with the
field names recorded histories already carry. Messages go in as the transcript store
holds them (content blocks spelled as Anthropic's Messages API spells them); a provider
with another format converts at its edge.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from temporalio.exceptions import ApplicationError

from activities.wire import Message, ModelSettings, StopReason, ToolSpec, Usage

# Called with each chunk of text (or of thinking) while a streamed answer arrives.
OnText = Callable[[str], Awaitable[None]]


@dataclass(frozen=True)
class ProviderCall:
    """One model call, in the provider-neutral form."""

    model: str  # the provider's own name for it, without the `provider:` prefix
    system: str
    max_tokens: int
    tools: list[ToolSpec]
    messages: list[dict[str, Any]]
    stream: bool = False
    # Lets a local test server script turns per session; real APIs ignore them.
    headers: dict[str, str] = field(default_factory=dict)
    # The prompt will be sent again with more at its end (the agent loop's calls): worth
    # marking for the provider's prompt cache. A one-off call (a summary) is not.
    cache: bool = True
    # Thinking, sampling, stop sequences and this call's tool choice; None: the defaults.
    settings: ModelSettings | None = None


@dataclass(frozen=True)
class ModelTurn:
    """A provider's answer, normalised."""

    message: Message
    stop_reason: StopReason
    usage: Usage
    model: str  # as the provider reports it


class Provider(Protocol):
    """A model API. Built once per worker process; secrets come from its environment."""

    name: str

    async def complete(
        self, call: ProviderCall, on_text: OnText | None = None, on_thinking: OnText | None = None
    ) -> ModelTurn:
        """One call; streamed when `call.stream`, with `on_text` given each chunk of the
        answer's text and `on_thinking` each chunk of the model's thinking."""
        ...

    async def count_tokens(self, call: ProviderCall) -> int | None:
        """The prompt's size in tokens, or None: counting is an optimisation."""
        ...

    def classify(self, err: BaseException) -> ApplicationError:
        """The one place that decides whether Temporal retries this provider's failure."""
        ...
