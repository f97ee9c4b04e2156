"""Prices per model in USD per million tokens, for cost budgets.

The client resolves the price when a session starts and puts it in the session's
input, so a later change to this table never changes a running session.
"""

from __future__ import annotations

from workflows.types import ModelPrice

PRICES: dict[str, ModelPrice] = {
    "claude-opus-4-5": ModelPrice(input=5, output=25, cache_write=6.25, cache_read=0.5),
    "claude-sonnet-4-5": ModelPrice(input=3, output=15, cache_write=3.75, cache_read=0.3),
    "claude-haiku-4-5": ModelPrice(input=1, output=5, cache_write=1.25, cache_read=0.1),
    "fake-model": ModelPrice(input=3, output=15, cache_write=3.75, cache_read=0.3),
}


def price_for(model: str) -> ModelPrice | None:
    return PRICES.get(model)
