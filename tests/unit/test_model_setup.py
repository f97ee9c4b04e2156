"""The model activity without a key fails the session at once, saying what to do."""

from __future__ import annotations

import pytest
from temporalio.exceptions import ApplicationError

from activities.providers.anthropic import AnthropicProvider


def test_a_missing_api_key_is_terminal_with_the_fix(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    with pytest.raises(ApplicationError) as err:
        AnthropicProvider().client()
    assert err.value.non_retryable
    assert "ANTHROPIC_API_KEY is not set in the worker's environment" in err.value.message


def test_a_key_in_the_environment_is_used(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-not-real")
    client = AnthropicProvider().client()
    assert client.api_key == "sk-test-not-real" and client.max_retries == 0
