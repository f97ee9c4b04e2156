"""Model providers, chosen by the model string's prefix.

`anthropic:claude-sonnet-4-5` is Anthropic's `claude-sonnet-4-5`, `openai:gpt-4.1-mini`
goes to OpenAI's Chat Completions API (or any server that speaks it); a bare name is
Anthropic's too, so sessions started before prefixes existed keep working. A prefix is
letters, digits, `-` and `_` before the first colon (a name with a dot before its colon,
like a Bedrock model id, stays bare; the spelling is in `infra/model_names.py`). A new
provider is one module implementing `Provider` and one entry in `FACTORIES`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from activities.model_errors import terminal
from activities.providers.base import ModelTurn, OnText, Provider, ProviderCall
from infra.model_names import split_prefix

__all__ = ["FACTORIES", "ModelTurn", "OnText", "Provider", "ProviderCall", "import_sdks", "resolve", "split"]


# Each SDK is imported when its provider is first built, or by `import_sdks()`, so the
# command line and the service, which import this package through the workflow's modules,
# never load one.
def _anthropic() -> Provider:
    from activities.providers.anthropic import AnthropicProvider

    return AnthropicProvider()


def _openai() -> Provider:
    from activities.providers.openai import OpenAIProvider

    return OpenAIProvider()


FACTORIES: dict[str, Callable[[], Provider]] = {
    "anthropic": _anthropic,
    "openai": _openai,
}


def import_sdks() -> None:
    """Import every provider's module and SDK now. The worker does at start: importing an
    SDK takes seconds, which the first model call would spend blocking the event loop."""
    from activities.providers import anthropic, openai  # noqa: F401  # pyright: ignore[reportUnusedImport]: imported for the side effect


# One per worker process: a provider holds a client and its connection pool.
_built: dict[str, Provider] = {}


def split(model: str) -> tuple[str, str]:
    """The provider's name and the model's own name; an unknown prefix is terminal."""
    name, bare = split_prefix(model)
    if name not in FACTORIES:
        known = ", ".join(f"{key}:" for key in FACTORIES)
        raise terminal(f"unknown model provider {name!r} in model {model!r}; known providers: {known}")
    return name, bare


def resolve(model: str, providers: Mapping[str, Provider] | None = None) -> tuple[Provider, str]:
    """The provider for `model` (from `providers` if given there) and the bare model name."""
    name, bare = split(model)
    if providers is not None and name in providers:
        return providers[name], bare
    if name not in _built:
        _built[name] = FACTORIES[name]()
    return _built[name], bare
