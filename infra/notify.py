"""Which URLs a session may notify, and the settings of the worker that delivers.

`AGENT_NOTIFY_ALLOW` (comma-separated URL prefixes) is read by the client and the API,
when a start's input is built (`sessions.start_input.resolve`), and by the worker, before
a session's first model call and before each delivery: a URL is accepted only if it
starts with one of the prefixes, so an API user cannot aim the worker anywhere. Empty or
unset: no notifications at all. A prefix matches whole parts of a URL: `https://h.example`
allows `https://h.example/x` but not `https://h.example.evil.org/`; a URL with a user or
password in it is never accepted. `AGENT_WEBHOOK_SECRET` (the worker only) signs every
body; `AGENT_NOTIFY_RETRY` sets the delivery's retry schedule (`workflows/options.py`).
Nothing here is ever part of a workflow's input or history but the URLs themselves.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

from infra.errors import BadRequest, ConfigError

ALLOW_ENV = "AGENT_NOTIFY_ALLOW"
SECRET_ENV = "AGENT_WEBHOOK_SECRET"
RETRY_ENV = "AGENT_NOTIFY_RETRY"
MAX_TARGETS = 10
MAX_URL_LENGTH = 2000
# The receiver refused the notification (a 4xx other than 408, 425, 429): not retried.
NOTIFY_REFUSED = "NotificationRefused"


class NotifyRefused(BadRequest):
    """A notification URL that may not be used; the text is one line."""


def allowed_prefixes(env: Mapping[str, str] | None = None) -> list[str]:
    """The prefixes in `AGENT_NOTIFY_ALLOW` (empty: none allowed)."""
    raw = (os.environ if env is None else env).get(ALLOW_ENV, "")
    return [p.strip() for p in raw.split(",") if p.strip()]


def webhook_secret(env: Mapping[str, str] | None = None) -> str | None:
    return (os.environ if env is None else env).get(SECRET_ENV) or None


def check_targets(urls: Iterable[str], prefixes: list[str]) -> list[str]:
    """The URLs, without repeats, if each may be notified; else `NotifyRefused` naming the first that may not."""
    targets = list(dict.fromkeys(urls))
    if not targets:
        return []
    if not prefixes:
        raise NotifyRefused(
            f"notifications are not allowed here: {ALLOW_ENV} is empty (it lists the URL prefixes allowed)"
        )
    if len(targets) > MAX_TARGETS:
        raise NotifyRefused(f"at most {MAX_TARGETS} notification URLs, not {len(targets)}")
    for url in targets:
        check_target(url, prefixes)
    return targets


def check_target(url: str, prefixes: list[str]) -> None:
    if len(url) > MAX_URL_LENGTH:
        raise NotifyRefused(f"notification URL longer than {MAX_URL_LENGTH} characters: {url[:60]}...")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises on a port that is not a number)
    except ValueError:
        raise NotifyRefused(f"not a URL: {url!r}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise NotifyRefused(
            f"a notification URL starts with http:// or https:// and names a host, not {url!r}"
        )
    if parts.username is not None or parts.password is not None:
        raise NotifyRefused(f"a notification URL may not carry a user or password: {url!r}")
    if not any(_matches(url, p) for p in prefixes):
        raise NotifyRefused(
            f"notification URL {url} is not allowed: {ALLOW_ENV} allows {', '.join(prefixes)}"
        )


def _matches(url: str, prefix: str) -> bool:
    """`url` starts with `prefix`, which ends at a boundary of the URL (a whole host, path segment)."""
    if not url.startswith(prefix):
        return False
    if prefix.endswith(("/", "?", "#", "&", "=")) or len(url) == len(prefix):
        return True
    return url[len(prefix)] in "/?#"


def retry_schedule(env: Mapping[str, str] | None = None) -> tuple[float, float, float] | None:
    """`AGENT_NOTIFY_RETRY=FIRST,MAX,GIVE_UP` in seconds: the first retry's wait, the longest
    wait, and when a delivery is abandoned; None when unset (the defaults)."""
    raw = (os.environ if env is None else env).get(RETRY_ENV, "").strip()
    if not raw:
        return None
    try:
        first, longest, give_up = (float(v) for v in raw.split(","))
    except ValueError:
        raise ConfigError(
            f"{RETRY_ENV} must be FIRST,MAX,GIVE_UP in seconds (like 5,600,3600), not {raw!r}"
        ) from None
    if not 0 < first <= longest <= give_up:
        raise ConfigError(f"{RETRY_ENV}: the seconds must grow, 0 < FIRST <= MAX <= GIVE_UP, not {raw!r}")
    return first, longest, give_up
