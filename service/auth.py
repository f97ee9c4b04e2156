"""Who is calling: the users file, bearer tokens, the page's session cookie.

A user is named in `AGENT_API_USERS` (TOML) with the SHA-256 of their token, or the token
itself for local use. Tokens are compared as hashes in constant time, over every user, so
neither a match's position nor a prefix leaks through timing. The browser trades the token
once (`/?token=...`) for a cookie (`Cookies`): `USER.EXPIRY.SIGNATURE`, the signature an
HMAC-SHA256 of `USER|TOKEN_SHA256|EXPIRY` keyed with the service's own key
(`AGENT_COOKIE_SECRET`, else a 0600 file in the data directory made on first use), so
reading the users file is not enough to make one. It lives `api.py --cookie-hours` (12 by
default), survives a server restart, and stops working when its user's token changes.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from fastapi import Depends, Request
from fastapi.security import APIKeyCookie, HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from infra.datadir import secret_key
from infra.errors import AgentError, ConfigError
from workflows.contract import TIMED_OUT

COOKIE = "agent_session"
COOKIE_SECRET_ENV = "AGENT_COOKIE_SECRET"
COOKIE_KEY_FILE = "cookie-secret"
COOKIE_HOURS = 12.0
OPERATOR = "operator"
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


class UsersFileError(ConfigError):
    """The users file cannot be read or breaks its schema; one line naming file and field."""


class Unauthorized(AgentError):
    """No token, or a wrong one."""


class Forbidden(AgentError):
    """A cookie-authenticated change that is not JSON: what a cross-site form would send."""


class UserEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    token_sha256: str | None = Field(default=None, pattern=r"^[0-9a-fA-F]{64}$")
    token: str | None = Field(default=None, min_length=8)
    roles: list[Literal["operator"]] = Field(default_factory=list)
    # Quotas (service/quotas.py), each optional: the agents they may start (and so their
    # tools), how many of their sessions may run at once, how many starts a minute (per
    # API process), and the most one session's cost budget may be.
    agents: list[str] | None = Field(default=None, max_length=1000)
    max_running: int | None = Field(default=None, ge=0)
    starts_per_minute: int | None = Field(default=None, ge=0)
    max_cost_budget: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _one_token(self) -> UserEntry:
        if (self.token is None) == (self.token_sha256 is None):
            raise ValueError("give exactly one of token_sha256 or token")
        return self


class UsersFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    users: dict[str, UserEntry] = Field(min_length=1)

    @model_validator(mode="after")
    def _names(self) -> UsersFile:
        for name in self.users:
            if not name or len(name) > 64 or not all(c.isalnum() or c in "._-@" for c in name):
                raise ValueError(f"user name {name!r}: use letters, digits and . _ - @ (at most 64)")
            if name == TIMED_OUT:  # a session's own decider, for a call no one decided in time
                raise ValueError(
                    f"user name {name!r} is reserved: a session records it for a call no one decided"
                )
        return self


@dataclass(frozen=True)
class Quota:
    """A user's quotas from the users file; None: not limited."""

    agents: tuple[str, ...] | None = None
    max_running: int | None = None
    starts_per_minute: int | None = None
    max_cost_budget: float | None = None


@dataclass(frozen=True)
class User:
    name: str
    token_sha256: bytes
    operator: bool = False
    quota: Quota = Quota()

    def may_see(self, owner: str) -> bool:
        return self.operator or hmac.compare_digest(owner.encode(), self.name.encode())


class Users:
    """The users the server knows, found by token or by cookie."""

    def __init__(self, users: list[User]):
        self.users = users

    def by_token(self, token: str) -> User | None:
        presented = hashlib.sha256(token.encode()).digest()
        found = None
        for user in self.users:  # no early exit: every token costs the same
            if hmac.compare_digest(presented, user.token_sha256):
                found = user
        return found

    def by_name(self, name: str) -> User | None:
        return next((user for user in self.users if user.name == name), None)


class Cookies:
    """The page's session cookies: made with the service's key, good for `hours`."""

    def __init__(self, key: bytes, hours: float = COOKIE_HOURS):
        self._key = key
        self.hours = hours

    @classmethod
    def from_env(cls, hours: float = COOKIE_HOURS) -> Cookies:
        """With `AGENT_COOKIE_SECRET`, else the key file in the data directory (`ConfigError` if unusable)."""
        return cls(secret_key(COOKIE_SECRET_ENV, COOKIE_KEY_FILE), hours)

    @property
    def max_age(self) -> int:
        return max(1, round(self.hours * 3600))

    def mint(self, user: User, now: float | None = None) -> str:
        """`USER.EXPIRY.SIGNATURE` for this user and their current token."""
        expiry = int((time.time() if now is None else now) + self.max_age)
        return f"{user.name}.{expiry}.{self._sign(user, expiry)}"

    def user(self, users: Users, value: str, now: float | None = None) -> User | None:
        """The cookie's user, if it is ours, unexpired, and made for their current token."""
        name, expiry_text, signature = ["", "", "", *value.rsplit(".", 2)][-3:]
        user = users.by_name(name)
        if user is None or not expiry_text.isdigit():
            return None
        expiry = int(expiry_text)
        if not hmac.compare_digest(signature, self._sign(user, expiry)):
            return None
        return user if expiry > (time.time() if now is None else now) else None

    def _sign(self, user: User, expiry: int) -> str:
        signed = f"{user.name}|{user.token_sha256.hex()}|{expiry}".encode()
        return hmac.new(self._key, signed, hashlib.sha256).hexdigest()


def load_users(path: Path) -> Users:
    """The users file, validated; `UsersFileError` names the file and the field at fault."""
    try:
        raw = tomllib.loads(path.read_text())
    except OSError as err:
        raise UsersFileError(f"users file {path}: {err.strerror}") from None
    except tomllib.TOMLDecodeError as err:
        raise UsersFileError(f"users file {path}: not TOML: {err}") from None
    except UnicodeDecodeError as err:
        raise UsersFileError(
            f"users file {path}: not UTF-8 text (byte {err.start}): save it as UTF-8"
        ) from None
    try:
        parsed = UsersFile.model_validate(raw)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(top level)"
        raise UsersFileError(f"users file {path}: {where}: {first['msg']}") from None
    return Users([_user(name, entry) for name, entry in parsed.users.items()])


def _user(name: str, entry: UserEntry) -> User:
    if entry.token_sha256:
        digest = bytes.fromhex(entry.token_sha256)
    else:
        assert entry.token is not None  # UserEntry holds exactly one of the two
        digest = hashlib.sha256(entry.token.encode()).digest()
    quota = Quota(
        agents=tuple(entry.agents) if entry.agents is not None else None, max_running=entry.max_running,
        starts_per_minute=entry.starts_per_minute, max_cost_budget=entry.max_cost_budget,
    )  # fmt: skip
    return User(name=name, token_sha256=digest, operator=OPERATOR in entry.roles, quota=quota)


def local_user() -> tuple[Users, str]:
    """Without a users file: one operator with a fresh random token (printed with the URL)."""
    token = secrets.token_urlsafe(32)
    user = User(name="local", token_sha256=hashlib.sha256(token.encode()).digest(), operator=True)
    return Users([user]), token


# The schemes, declared so that /openapi.json and /docs describe them.
bearer = HTTPBearer(auto_error=False, description="Authorization: Bearer TOKEN")
cookie = APIKeyCookie(name=COOKIE, auto_error=False, description="set by opening /?token=TOKEN")


async def current_user(
    request: Request,
    credentials: HTTPAuthorizationCredentials | None = Depends(bearer),
    session_cookie: str | None = Depends(cookie),
) -> User:
    """The caller, from the bearer token or the page's cookie; 401 without either."""
    users: Users = request.app.state.users
    cookies: Cookies = request.app.state.cookies
    if credentials is not None:
        user = users.by_token(credentials.credentials)
        if user is None:
            raise Unauthorized("wrong token")
        return user
    if session_cookie is not None:
        user = cookies.user(users, session_cookie)
        if user is None:
            raise Unauthorized("the session cookie is not valid or has expired; open /?token=TOKEN again")
        if request.method not in SAFE_METHODS and not _is_json(request):
            raise Forbidden("a change made with the session cookie must be sent as application/json")
        return user
    raise Unauthorized("send Authorization: Bearer TOKEN (or open /?token=TOKEN in a browser)")


def bearer_user(users: Users, authorization: str | None) -> User:
    """The caller of an endpoint that takes only a bearer token (`/mcp`, `/a2a`): no cookie,
    so a page on another site cannot act with the browser's session."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("send Authorization: Bearer TOKEN")
    user = users.by_token(token.strip())
    if user is None:
        raise Unauthorized("wrong token")
    return user


def _is_json(request: Request) -> bool:
    return request.headers.get("content-type", "").split(";")[0].strip().lower() == "application/json"
