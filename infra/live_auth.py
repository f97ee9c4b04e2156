"""The credential a follower shows a worker's live text server (activities/live_server.py).

A credential is `EXPIRY.SIGNATURE`: the signature an HMAC-SHA256 of `SESSION|EXPIRY`
keyed with the deployment's live key, `AGENT_LIVE_SECRET`, or when that is unset a key
made on first use in the data directory (`$AGENT_DATA_DIR/live-secret`, mode 0600), which
workers and followers on one machine share; across machines the operator sets
`AGENT_LIVE_SECRET` on every worker and follower. Followers (the command line's `watch`,
the service's feeds and through them its SSE, MCP and A2A streams) mint one for each
request from the key; nothing carries it between processes, so it is never in a worker's
identity, a session's history or a log line. It goes in the request's `Authorization:
Bearer` header, never in a URL.

`LiveKey.check` is the one check of every endpoint the live server has or will have: a
credential names one session, so it opens only that session's calls.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import time

from infra.datadir import secret_key

LIVE_SECRET_ENV = "AGENT_LIVE_SECRET"
LIVE_KEY_FILE = "live-secret"
LIFETIME_S = 300  # a follower mints one per request; it is checked when the request comes


class LiveKey:
    """Mints and checks live credentials with one key."""

    def __init__(self, key: bytes):
        self._key = key

    @classmethod
    def from_env(cls) -> LiveKey:
        """`AGENT_LIVE_SECRET`, else the data directory's key file (`ConfigError` if unusable)."""
        return cls(secret_key(LIVE_SECRET_ENV, LIVE_KEY_FILE))

    def mint(self, session_id: str, now: float | None = None, lifetime: float = LIFETIME_S) -> str:
        """A credential for `session_id`'s live endpoints, good for `lifetime` seconds."""
        expiry = int((time.time() if now is None else now) + lifetime)
        return f"{expiry}.{self._sign(session_id, expiry)}"

    def check(self, session_id: str, credential: str, now: float | None = None) -> bool:
        """Whether `credential` was minted with this key for this session and has not expired."""
        expiry_text, _, signature = credential.partition(".")
        if not expiry_text.isdigit() or len(expiry_text) > 12:
            return False
        expiry = int(expiry_text)
        if not hmac.compare_digest(signature, self._sign(session_id, expiry)):
            return False
        return expiry > (time.time() if now is None else now)

    def _sign(self, session_id: str, expiry: int) -> str:
        return hmac.new(self._key, f"{session_id}|{expiry}".encode(), hashlib.sha256).hexdigest()


@functools.cache
def follower_key() -> LiveKey:
    """This follower process's key, read once."""
    return LiveKey.from_env()


def bearer(credential: str) -> dict[str, str]:
    """The request headers that carry a credential."""
    return {"Authorization": f"Bearer {credential}"}


def presented(authorization: str | None) -> str:
    """The credential in an `Authorization: Bearer` header ('' when there is none)."""
    scheme, _, value = (authorization or "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" else ""
