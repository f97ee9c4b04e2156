"""Page tokens (sessions/listing.py): opaque, sealed to the filter and user they were made
for, and the same key for every process on one data directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.errors import BadRequest
from sessions.listing import PageTokens

MADE_FOR = {"list": "sessions", "status": "completed", "user": "alice"}


def test_a_token_gives_back_its_position_for_its_filter_and_user_only(tmp_path: Path):
    tokens = PageTokens.from_environment(tmp_path)
    token = tokens.seal(b"visibility's own token", MADE_FOR)
    assert tokens.open(token, MADE_FOR) == b"visibility's own token"
    for other in ({**MADE_FOR, "status": None}, {**MADE_FOR, "user": "bob"}, {**MADE_FOR, "list": "a2a"}):
        with pytest.raises(BadRequest, match="made for another filter or user"):
            tokens.open(token, other)


@pytest.mark.parametrize("forged", ["", "x", "not.a.token", "AAAA.BBBB"])
def test_a_forged_or_altered_token_is_refused(tmp_path: Path, forged: str):
    tokens = PageTokens.from_environment(tmp_path)
    with pytest.raises(BadRequest, match="not one this service made"):
        tokens.open(forged, MADE_FOR)
    head, _, mac = tokens.seal(b"p", MADE_FOR).partition(".")
    with pytest.raises(BadRequest, match="not one this service made"):
        tokens.open(f"{head[:-1]}{'A' if head[-1] != 'A' else 'B'}.{mac}", MADE_FOR)


def test_every_process_on_a_data_directory_shares_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("AGENT_PAGE_TOKEN_KEY", raising=False)
    token = PageTokens.from_environment(tmp_path).seal(b"p", MADE_FOR)
    assert PageTokens.from_environment(tmp_path).open(token, MADE_FOR) == b"p"
    assert (tmp_path / "page-token.key").stat().st_mode & 0o777 == 0o600
    monkeypatch.setenv("AGENT_PAGE_TOKEN_KEY", "another key")
    with pytest.raises(BadRequest):
        PageTokens.from_environment(tmp_path).open(token, MADE_FOR)
