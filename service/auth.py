"""Who is calling: the users file, bearer tokens, the page's session cookie.

A user is named in `AGENT_API_USERS` (TOML) with the SHA-256 of their token, or the token
itself for local use. Tokens are compared as hashes in constant time, over every user, so
neither a match's position nor a prefix leaks through timing. The browser trades the token
once (`/?token=...`) for a cookie signed with the user's token hash: it survives a server
restart, and stops working when the token changes.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from fastapi import Depends, Request
from fastapi.security import APIKeyCookie, HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from infra.errors import AgentError, ConfigError

COOKIE = "agent_session"
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
        return self


@dataclass(frozen=True)
class User:
    name: str
    token_sha256: bytes
    operator: bool = False

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

    def cookie_for(self, user: User) -> str:
        return f"{user.name}.{_sign(user)}"

    def by_cookie(self, value: str) -> User | None:
        name, _, signature = value.rpartition(".")
        for user in self.users:
            if user.name == name and hmac.compare_digest(signature, _sign(user)):
                return user
        return None


def _sign(user: User) -> str:
    return hmac.new(user.token_sha256, f"cookie:{user.name}".encode(), hashlib.sha256).hexdigest()


def load_users(path: Path) -> Users:
    """The users file, validated; `UsersFileError` names the file and the field at fault."""
    try:
        raw = tomllib.loads(path.read_text())
    except OSError as err:
        raise UsersFileError(f"users file {path}: {err.strerror}") from None
    except tomllib.TOMLDecodeError as err:
        raise UsersFileError(f"users file {path}: not TOML: {err}") from None
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
    return User(name=name, token_sha256=digest, operator=OPERATOR in entry.roles)


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
    if credentials is not None:
        user = users.by_token(credentials.credentials)
        if user is None:
            raise Unauthorized("wrong token")
        return user
    if session_cookie is not None:
        user = users.by_cookie(session_cookie)
        if user is None:
            raise Unauthorized("the session cookie is not valid; open /?token=TOKEN again")
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
