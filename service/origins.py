"""Which `Host` and `Origin` the service answers: its guard against DNS rebinding.

The attack: a page the user visits (evil.example) has its name re-pointed at 127.0.0.1,
so the user's browser sends that page's requests to the service on loopback, as if it
were evil.example's own server. A token alone does not stop it where the browser holds
one (the page's cookie), and the service would answer a page it never meant to serve.
Two headers give it away, and every request passes this check before any route sees it
(the API, the page, the events, `/mcp`, `/a2a`, the agent card):

- `Host`, the name the request was sent to, must be one the service answers to, else
  421 (Misdirected Request);
- `Origin`, the page a browser request comes from, when present, must be an allowed
  one, or the very host the request was sent to (the service's own page), else 403.

Allowed by default: the loopback names (127.0.0.1, localhost, [::1]) on the port the
service listens on, the address it listens on when that is a specific one, and the
public URL the operator configures (`api.py --public-url`). `--allow-host` and
`--allow-origin` (or `AGENT_ALLOWED_HOSTS`, `AGENT_ALLOWED_ORIGINS`) add more. A request
without `Origin` (a program, not a page) is judged by its token alone. `/healthz` is
answered whatever the headers: it tells nothing, and load balancers probe it by address.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from infra.errors import BadRequest
from service.http_errors import error_response

HOSTS_ENV = "AGENT_ALLOWED_HOSTS"
ORIGINS_ENV = "AGENT_ALLOWED_ORIGINS"
PUBLIC_URL_ENV = "AGENT_PUBLIC_URL"
LOOPBACK = ("127.0.0.1", "localhost", "[::1]")
UNCHECKED_PATHS = frozenset({"/healthz"})
DEFAULT_PORTS = {"http": 80, "https": 443}
_NAME = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9._-]+)$")


@dataclass(frozen=True)
class HostName:
    """A host as a request names it: the name, and the port (None: any port)."""

    name: str
    port: int | None

    def matches(self, name: str, port: int) -> bool:
        return self.name == name and self.port in (None, port)


def _host(value: str, default_port: int | None) -> HostName:
    """`name`, `name:port`, `[v6]` or `[v6]:port`, lowercased; ValueError if it is none."""
    parts = urlsplit("//" + value.strip())
    name = parts.hostname
    if not name or parts.username is not None or parts.path or parts.query or parts.fragment:
        raise ValueError(value)
    port = parts.port  # ValueError for a port out of range or not a number
    if ":" in name:  # an IPv6 address: the brackets urlsplit took off
        ipaddress.IPv6Address(name)
        name = f"[{name}]"
    if not _NAME.match(name):
        raise ValueError(value)
    return HostName(name.lower(), port if port is not None else default_port)


def _origin(value: str) -> str:
    """An origin (`scheme://host[:port]`) in one spelling: lowercase, without the
    scheme's default port; ValueError if it is not one."""
    parts = urlsplit(value.strip())
    if parts.scheme not in DEFAULT_PORTS or parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(value)
    host = _host(parts.netloc, DEFAULT_PORTS[parts.scheme])
    port = "" if host.port == DEFAULT_PORTS[parts.scheme] else f":{host.port}"
    return f"{parts.scheme}://{host.name}{port}"


@dataclass(frozen=True)
class Access:
    """The hosts and origins the service answers, and its public URL (if configured)."""

    hosts: tuple[HostName, ...]
    origins: frozenset[str]
    public_url: str | None = None

    @classmethod
    def build(
        cls,
        port: int,
        listen: str | None = None,
        public_url: str | None = None,
        hosts: Iterable[str] = (),
        origins: Iterable[str] = (),
    ) -> Access:
        """The defaults for a service on `listen`:`port` and the operator's additions;
        `BadRequest` names a value that is not a host, an origin or a URL."""
        names: list[str] = list(LOOPBACK)
        if listen and _specific(listen):
            names.append(f"[{listen}]" if ":" in listen else listen)
        allowed_hosts = [HostName(name, port) for name in names]
        allowed_origins = {f"http://{name}:{port}" for name in names}
        if public_url:
            try:
                origin = _origin(_base(public_url))
            except ValueError:
                raise BadRequest(f"public URL {public_url!r}: give http(s)://HOST[:PORT][/PATH]") from None
            public_url = public_url.rstrip("/")
            allowed_origins.add(origin)
            allowed_hosts.append(_host(urlsplit(origin).netloc, None))
        for value in hosts:
            try:
                allowed_hosts.append(_host(value, None))
            except ValueError:
                raise BadRequest(f"allowed host {value!r}: give NAME or NAME:PORT") from None
        for value in origins:
            try:
                allowed_origins.add(_origin(value))
            except ValueError:
                raise BadRequest(
                    f"allowed origin {value!r}: give scheme://HOST[:PORT], as a browser sends it"
                ) from None
        return cls(tuple(allowed_hosts), frozenset(allowed_origins), public_url or None)

    def host_allowed(self, host: str, scheme: str) -> bool:
        try:
            found = _host(host, DEFAULT_PORTS.get(scheme, 80))
        except ValueError:
            return False
        port = found.port if found.port is not None else DEFAULT_PORTS.get(scheme, 80)
        return any(allowed.matches(found.name, port) for allowed in self.hosts)

    def origin_allowed(self, origin: str, host: str, scheme: str) -> bool:
        """An allowed origin, or the allowed host the request was sent to (the service's own page)."""
        try:
            spelled = _origin(origin)
        except ValueError:
            return False
        if spelled in self.origins:
            return True
        if not self.host_allowed(host, scheme):
            return False
        try:
            same = _host(host, None)
        except ValueError:
            return False
        written = f"{same.name}:{same.port}" if same.port is not None else same.name
        netloc = urlsplit(spelled).netloc
        default = DEFAULT_PORTS[urlsplit(spelled).scheme]
        return netloc in (written, written.removesuffix(f":{default}"))


def _base(url: str) -> str:
    """The origin part of a URL (scheme://netloc)."""
    parts = urlsplit(url.strip())
    return f"{parts.scheme}://{parts.netloc}"


def _specific(listen: str) -> bool:
    """Whether the listening address names one interface (not 0.0.0.0 or ::)."""
    try:
        return not ipaddress.ip_address(listen).is_unspecified
    except ValueError:
        return bool(listen)  # a name, e.g. a machine's own


def from_settings(
    port: int, listen: str | None, public_url: str | None, hosts: Iterable[str], origins: Iterable[str]
) -> Access:
    """The access of `api.py`: its flags, then the environment's lists (comma or space separated)."""
    return Access.build(
        port,
        listen,
        public_url or os.environ.get(PUBLIC_URL_ENV) or None,
        [*hosts, *_listed(os.environ.get(HOSTS_ENV, ""))],
        [*origins, *_listed(os.environ.get(ORIGINS_ENV, ""))],
    )


def _listed(value: str) -> list[str]:
    return [item for item in re.split(r"[\s,]+", value) if item]


class Guard:
    """The ASGI middleware: 421 for a host the service does not answer to, 403 for an
    origin it does not serve; everything else goes on as it came."""

    def __init__(self, app: ASGIApp, access: Access):
        self.app = app
        self.access = access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in UNCHECKED_PATHS:
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        host = headers.get(b"host", b"").decode("latin-1")
        origin = headers.get(b"origin")
        scheme = "https" if scope.get("scheme") == "https" else "http"
        if origin is not None and not self.access.origin_allowed(origin.decode("latin-1"), host, scheme):
            shown = origin.decode("latin-1")[:200]
            response = error_response(
                403, "Forbidden",
                f"requests from {shown} are not allowed here (api.py --allow-origin adds an origin)",
            )  # fmt: skip
        elif not self.access.host_allowed(host, scheme):
            response = error_response(
                421, "MisdirectedRequest",
                f"this service does not answer to host {host[:200]!r} (api.py --allow-host adds one)",
            )  # fmt: skip
        else:
            return await self.app(scope, receive, send)
        await response(scope, receive, send)
