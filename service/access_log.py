"""api.py's log without credentials. uvicorn's access log writes each request's path with
its query string, and a browser opens the page once as `/?token=TOKEN`: the value of every
query parameter that names a credential (`token`, `key`, `secret`, `password`,
`credential`, `signature`) is replaced by `[hidden]` before any handler sees the line."""

from __future__ import annotations

import logging
import re

HIDDEN = "[hidden]"
CREDENTIAL_IN_QUERY = re.compile(
    r"([?&][^=&#\s\"]*(?:token|key|secret|password|credential|signature)[^=&#\s\"]*=)[^&#\s\"]*",
    re.IGNORECASE,
)
LOGGERS = ("uvicorn.access", "uvicorn.error")


def without_credentials(text: str) -> str:
    return CREDENTIAL_IN_QUERY.sub(rf"\1{HIDDEN}", text)


class WithoutCredentials(logging.Filter):
    """Hides credentials in a record's message and its string arguments."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = without_credentials(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(without_credentials(a) if isinstance(a, str) else a for a in record.args)
        return True


def install() -> None:
    """Filter uvicorn's loggers (after uvicorn has configured them)."""
    for name in LOGGERS:
        logging.getLogger(name).addFilter(WithoutCredentials())
