"""Prices per model in USD per million tokens, for cost budgets.

The client resolves the price when a session starts and puts it in the session's
input, so a later change to this table never changes a running session.
"""

from __future__ import annotations

from workflows.types import ModelPrice

# Anthropic's list prices (5-minute cache writes); edit to match your contract.
_OPUS = ModelPrice(input=5, output=25, cache_write=6.25, cache_read=0.5)
_SONNET = ModelPrice(input=3, output=15, cache_write=3.75, cache_read=0.3)
_HAIKU = ModelPrice(input=1, output=5, cache_write=1.25, cache_read=0.1)

PRICES: dict[str, ModelPrice] = {
    "claude-opus-4-5": _OPUS,
    "claude-opus-4-6": _OPUS,
    "claude-sonnet-4-5": _SONNET,
    "claude-sonnet-4-6": _SONNET,
    "claude-haiku-4-5": _HAIKU,
}


def price_for(model: str) -> ModelPrice | None:
    return PRICES.get(model)
