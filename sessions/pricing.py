"""Prices per model in USD per million tokens, for cost budgets.

The client resolves the price when a session starts and puts it in the session's
input, so a later change to this table never changes a running session. Keys carry the
provider's prefix; a bare model name is Anthropic's, as everywhere.
"""

from __future__ import annotations

from infra.model_names import split_prefix
from workflows.contract import ModelPrice

# Anthropic's list prices (5-minute cache writes); edit to match your contract.
_OPUS = ModelPrice(input=5, output=25, cache_write=6.25, cache_read=0.5)
_SONNET = ModelPrice(input=3, output=15, cache_write=3.75, cache_read=0.3)
_HAIKU = ModelPrice(input=1, output=5, cache_write=1.25, cache_read=0.1)


def _openai(input: float, cache_read: float, output: float) -> ModelPrice:
    # OpenAI charges nothing extra to write its cache, and reports no cache writes.
    return ModelPrice(input=input, output=output, cache_write=input, cache_read=cache_read)


PRICES: dict[str, ModelPrice] = {
    "anthropic:claude-opus-4-5": _OPUS,
    "anthropic:claude-opus-4-6": _OPUS,
    "anthropic:claude-sonnet-4-5": _SONNET,
    "anthropic:claude-sonnet-4-6": _SONNET,
    "anthropic:claude-haiku-4-5": _HAIKU,
    # OpenAI's list prices; check them against your contract.
    "openai:gpt-4.1": _openai(2.00, 0.50, 8.00),
    "openai:gpt-4.1-mini": _openai(0.40, 0.10, 1.60),
    "openai:gpt-4.1-nano": _openai(0.10, 0.025, 0.40),
    "openai:gpt-4o": _openai(2.50, 1.25, 10.00),
    "openai:gpt-4o-mini": _openai(0.15, 0.075, 0.60),
    "openai:gpt-5": _openai(1.25, 0.125, 10.00),
    "openai:gpt-5-mini": _openai(0.25, 0.025, 2.00),
    "openai:gpt-5-nano": _openai(0.05, 0.005, 0.40),
}


def price_for(model: str) -> ModelPrice | None:
    """The price of `model` (`provider:name` or a bare Anthropic name); None if unknown."""
    provider, bare = split_prefix(model)  # an unknown provider has no prices; starting says why
    return PRICES.get(f"{provider}:{bare}")
