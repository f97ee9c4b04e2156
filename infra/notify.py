"""Which URLs a session may notify, and the settings of the worker that delivers.

`AGENT_NOTIFY_ALLOW` (comma-separated URL prefixes) is read by the client and the API,
when a start's input is built (`sessions.start_input.resolve`), and by the worker, before
a session's first model call and before each delivery: a URL is accepted only if it
starts with one of the prefixes, so an API user cannot aim the worker anywhere. Empty or
unset: no notifications at all. A prefix matches whole parts of a URL: `https://h.example`
allows `https://h.example/x` but not `https://h.example.evil.org/`; a URL with a user or
password in it is never accepted. The check is made on the URL as it will be sent
(`normalized`: scheme and host in lower case, no default port, backslashes as slashes,
percent-encoded dots, slashes and backslashes decoded, dot segments removed, no
fragment), and that spelling is what the session records and what the worker POSTs to:
`https://h.example/hooks/../admin` is `https://h.example/admin`, checked as such. `AGENT_WEBHOOK_SECRET` (the worker only) signs every
body; `AGENT_NOTIFY_RETRY` sets the delivery's retry schedule (`workflows/options.py`).
Nothing here is ever part of a workflow's input or history but the URLs themselves.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit, urlunsplit

from infra.errors import BadRequest, ConfigError

ALLOW_ENV = "AGENT_NOTIFY_ALLOW"
SECRET_ENV = "AGENT_WEBHOOK_SECRET"
RETRY_ENV = "AGENT_NOTIFY_RETRY"
MAX_TARGETS = 10
MAX_URL_LENGTH = 2000
DEFAULT_PORTS = {"http": 80, "https": 443}
# What a server may decode into a path's structure: dots, slashes and backslashes.
ENCODED_STRUCTURE = re.compile(r"%(2e|2f|5c)", re.IGNORECASE)
# The receiver refused the notification (a 4xx other than 408, 425, 429): not retried.
NOTIFY_REFUSED = "NotificationRefused"


class NotifyRefused(BadRequest):
    """A notification URL that may not be used; the text is one line."""


def allowed_prefixes(env: Mapping[str, str] | None = None) -> list[str]:
    """The prefixes in `AGENT_NOTIFY_ALLOW` (empty: none allowed), spelled as `normalized`
    spells URLs; a prefix that is not an http(s) URL is a `ConfigError`."""
    raw = (os.environ if env is None else env).get(ALLOW_ENV, "")
    return normalized_prefixes([p.strip() for p in raw.split(",") if p.strip()])


def normalized_prefixes(prefixes: list[str]) -> list[str]:
    """The prefixes spelled as `normalized` spells URLs; one that is not an http(s) URL is a `ConfigError`."""
    found = []
    for prefix in prefixes:
        try:
            found.append(normalized(prefix))
        except NotifyRefused as err:
            raise ConfigError(f"{ALLOW_ENV}: {prefix!r} is not a URL prefix it can use: {err}") from None
    return found


def webhook_secret(env: Mapping[str, str] | None = None) -> str | None:
    return (os.environ if env is None else env).get(SECRET_ENV) or None


def check_targets(urls: Iterable[str], prefixes: list[str]) -> list[str]:
    """The URLs as they will be sent (`normalized`), without repeats, if each may be
    notified; else `NotifyRefused` naming the first that may not."""
    given = list(dict.fromkeys(urls))
    if not given:
        return []
    if not prefixes:
        raise NotifyRefused(
            f"notifications are not allowed here: {ALLOW_ENV} is empty (it lists the URL prefixes allowed)"
        )
    if len(given) > MAX_TARGETS:
        raise NotifyRefused(f"at most {MAX_TARGETS} notification URLs, not {len(given)}")
    prefixes = normalized_prefixes(prefixes)
    return list(dict.fromkeys(check_target(url, prefixes) for url in given))


def check_target(url: str, prefixes: list[str]) -> str:
    """The URL as it will be sent, if it starts with one of the prefixes (normalized)."""
    sent = normalized(url)
    if not any(_matches(sent, p) for p in prefixes):
        shown = url if sent == url else f"{url} (that is, {sent})"
        raise NotifyRefused(
            f"notification URL {shown} is not allowed: {ALLOW_ENV} allows {', '.join(prefixes)}"
        )
    return sent


def normalized(url: str) -> str:
    """`url` as it will be sent: scheme and host in lower case, no default port, backslashes
    as slashes, percent-encoded dots, slashes and backslashes decoded in the path, its dot
    segments removed, no fragment. `NotifyRefused` when it is not an http(s) URL naming a
    host, or carries a user or password."""
    if len(url) > MAX_URL_LENGTH:
        raise NotifyRefused(f"notification URL longer than {MAX_URL_LENGTH} characters: {url[:60]}...")
    if any(c.isspace() or ord(c) < 0x20 or c == "\x7f" for c in url):
        raise NotifyRefused(f"a notification URL has no spaces or control characters: {url!r}")
    # As browsers read an http(s) URL: a backslash before the query is a slash.
    cut = min((i for i in (url.find("?"), url.find("#")) if i != -1), default=len(url))
    try:
        parts = urlsplit(url[:cut].replace("\\", "/") + url[cut:])
        port = parts.port
    except ValueError:
        raise NotifyRefused(f"not a URL: {url!r}") from None
    scheme, host = parts.scheme.lower(), parts.hostname
    if scheme not in DEFAULT_PORTS or not host:
        raise NotifyRefused(
            f"a notification URL starts with http:// or https:// and names a host, not {url!r}"
        )
    if parts.username is not None or parts.password is not None:
        raise NotifyRefused(f"a notification URL may not carry a user or password: {url!r}")
    host = f"[{host}]" if ":" in host else host
    netloc = host if port in (None, DEFAULT_PORTS[scheme]) else f"{host}:{port}"
    path = _without_dot_segments(_decoded(parts.path))
    import httpx  # the client the worker POSTs with; loaded only when a URL is checked

    sent = str(httpx.URL(urlunsplit((scheme, netloc, path, parts.query, ""))))
    if str(httpx.URL(sent)) != sent:  # what the worker POSTs to is exactly what was checked
        raise NotifyRefused(f"not a URL that can be sent as it is checked: {url!r}")
    return sent


def _decoded(path: str) -> str:
    """The path with encoded dots, slashes and backslashes decoded (repeatedly, so `%252e`
    stays as sent but `%2e` is a dot), and backslashes as slashes."""
    while True:
        found = ENCODED_STRUCTURE.sub(lambda m: bytes.fromhex(m.group(1)).decode(), path).replace("\\", "/")
        if found == path:
            return path
        path = found


def _without_dot_segments(path: str) -> str:
    """RFC 3986's remove_dot_segments (section 5.2.4)."""
    out: list[str] = []
    segments = path.split("/")
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == ".":
            if last:
                out.append("")
        elif segment == "..":
            if len(out) > 1:
                out.pop()
            if last:
                out.append("")
        else:
            out.append(segment)
    return "/".join(out) if out != [""] else "/"


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
