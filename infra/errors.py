"""The project's own failures, in one hierarchy. Every entry point catches `AgentError`
and prints it as one line (`error: ...`) with exit code 1; the HTTP service maps each
branch to a status (service/http_errors.py).

AgentError
├── Unreachable        Temporal cannot be reached
├── SessionNotFound    no session with that id (or not the caller's)
├── SessionExists      the id is taken
├── SessionEnded       the session has ended; it takes no more decisions
├── NoWorker           no worker answered in time
├── Busy               a read did not get through in time; retry after `retry_after` seconds
├── OverQuota          a start past one of the user's quotas; retry after `retry_after` seconds
├── NotAllowed         a start of an agent the users file does not give the user
├── Rejected           the session refused an action (its validator said why)
│   └── InvalidInput   ... because a payload broke a schema (an edited tool input)
├── BadRequest         the caller's own mistake (arguments, files, payloads)
│   ├── AttachmentError    a file that cannot be attached (infra/attachments.py)
│   └── NotifyRefused      a notification URL the operator did not allow (infra/notify.py)
└── ConfigError        the process's settings cannot work: an environment variable, a flag,
    │                  a port in use, OTEL_* values
    ├── DefinitionError    the agent definitions file (infra/definitions.py)
    ├── UsersFileError     the service's users file (service/auth.py)
    └── MissingExtra       a setting whose optional dependencies are not installed (infra/extras.py)
"""

from __future__ import annotations


class AgentError(Exception):
    """A failure a person can act on; its text is one line."""


class Unreachable(AgentError):
    """Temporal could not be reached."""


class SessionNotFound(AgentError):
    def __init__(self, session_id: str):
        super().__init__(f"no session {session_id!r}")
        self.session_id = session_id


class MemoryNotFound(SessionNotFound):
    """No memory by that key in the scope (a 404, as an unknown session is)."""

    def __init__(self, key: str):
        AgentError.__init__(self, f"no memory {key!r}")


class SessionExists(AgentError):
    def __init__(self, session_id: str):
        super().__init__(f"session {session_id} already exists")
        self.session_id = session_id


class SessionEnded(AgentError):
    pass


class NoWorker(AgentError):
    pass


class Busy(AgentError):
    """A read that Temporal (or the session's worker) did not answer within the caller's
    deadline, retried meanwhile: busy, not broken; worth asking again after `retry_after` s."""

    def __init__(self, message: str, retry_after: int = 2):
        super().__init__(message)
        self.retry_after = retry_after


class OverQuota(AgentError):
    """A start past a quota of the users file (sessions running, starts a minute): nothing
    started, nothing stored; worth asking again after `retry_after` seconds."""

    def __init__(self, message: str, retry_after: int):
        super().__init__(message)
        self.retry_after = retry_after


class NotAllowed(AgentError):
    """A start of an agent the users file does not give the user."""


class Rejected(AgentError):
    pass


class InvalidInput(Rejected):
    pass


class BadRequest(AgentError):
    pass


class ConfigError(AgentError):
    """A process setting that cannot work: the message names it and says what was expected."""
