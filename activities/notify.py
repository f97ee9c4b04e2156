"""Notifications: one signed JSON `POST` to one URL, and the worker's check before a
session that notifies starts.

The body is the notification as the workflow recorded it, serialized the same way on
every attempt, so its signature and its `Idempotency-Key` (the notification's id, from
the workflow) are the same on every retry. `X-Agent-Signature: sha256=<hex>` is the
HMAC-SHA256 of the raw body with the worker's `AGENT_WEBHOOK_SECRET`, which stays in this
process: it is never in a workflow's input, its history or a log line. A 2xx answer is a
delivery; a 4xx other than 408, 425 and 429 is a refusal, not retried; anything else
(another status, a connection that fails, a timeout) is retried by the activity's retry
policy (workflows/options.py). Every failure carries the attempt's number, so the workflow
knows how many attempts a delivery took, whatever ended it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel
from temporalio import activity
from temporalio.exceptions import ApplicationError

from infra.notify import (
    NOTIFY_REFUSED,
    SECRET_ENV,
    NotifyRefused,
    allowed_prefixes,
    check_targets,
    normalized_prefixes,
    retry_schedule,
    webhook_secret,
)

POST_TIMEOUT = 10.0  # seconds: connecting, and waiting for the answer
RETRIED_4XX = (408, 425, 429)
SIGNATURE_HEADER = "X-Agent-Signature"
NOT_SENT = "NotificationNotSent"  # the worker cannot sign or may not send: not retried


class Notification(BaseModel):
    """One notification to one URL, as the workflow hands it to the activity."""

    url: str
    key: str  # the Idempotency-Key: the same on every attempt
    body: dict[str, Any]


class Delivery(BaseModel):
    attempt: int  # the attempt that was answered 2xx
    status: int


def body_bytes(body: dict[str, Any]) -> bytes:
    """The raw body: compact JSON, the same bytes for the same notification."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def signature(secret: str, raw: bytes) -> str:
    """The `X-Agent-Signature` value of a body: `sha256=` and the HMAC-SHA256 in hex."""
    return "sha256=" + hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()


class NotifyActivities:
    """The activities that deliver notifications, with this worker's secret and allowed prefixes."""

    def __init__(
        self,
        secret: str | None,
        allow: list[str],
        schedule: tuple[float, float, float] | None = None,
    ) -> None:
        self._secret = secret
        self.allow = normalized_prefixes(allow)
        # The retry schedule this worker gives deliveries (None: the default one).
        self.schedule = schedule

    @classmethod
    def from_env(cls) -> NotifyActivities:
        """`AGENT_WEBHOOK_SECRET`, `AGENT_NOTIFY_ALLOW` and `AGENT_NOTIFY_RETRY` of this process."""
        return cls(webhook_secret(), allowed_prefixes(), retry_schedule())

    @property
    def can_sign(self) -> bool:
        return self._secret is not None

    def activities(self) -> list[Callable[..., Any]]:
        return [self.check_notify, self.deliver_notification]

    def problem(self, urls: list[str]) -> str | None:
        """Why this worker cannot notify these URLs, or None."""
        if not urls:
            return None
        if self._secret is None:
            return f"this worker cannot sign notifications: {SECRET_ENV} is not set"
        try:
            check_targets(urls, self.allow)
        except NotifyRefused as err:
            return f"this worker refuses it: {err}"
        return None

    def checked(self, url: str) -> str:
        """The URL as it is sent (infra/notify.py `normalized`), once this worker has
        checked that spelling; `ApplicationError` (not retried) when it may not."""
        if (problem := self.problem([url])) is not None:
            raise ApplicationError(problem, activity.info().attempt, type=NOT_SENT, non_retryable=True)
        [sent] = check_targets([url], self.allow)
        return sent

    @activity.defn(name="check_notify")
    async def check_notify(self, urls: list[str]) -> str | None:
        """Before a session that notifies starts: why it cannot, or None."""
        return self.problem(urls)

    @activity.defn(name="deliver_notification")
    async def deliver_notification(self, notification: Notification) -> Delivery:
        attempt = activity.info().attempt
        url = self.checked(notification.url)
        assert self._secret is not None
        raw = body_bytes(notification.body)
        headers = {
            "Content-Type": "application/json",
            "Idempotency-Key": notification.key,
            SIGNATURE_HEADER: signature(self._secret, raw),
            "User-Agent": "agent-notify/1",
        }
        import httpx  # here, not at the top: the workflow imports this module for its references

        try:
            async with httpx.AsyncClient(timeout=POST_TIMEOUT, follow_redirects=False) as http:
                answer = await http.post(url, content=raw, headers=headers)
        except httpx.HTTPError as err:
            raise ApplicationError(f"POST {url} failed: {type(err).__name__}: {err}", attempt) from None
        status = answer.status_code
        if 200 <= status < 300:
            return Delivery(attempt=attempt, status=status)
        refused = 400 <= status < 500 and status not in RETRIED_4XX
        raise ApplicationError(
            f"POST {url} was answered {status}",
            attempt,
            type=NOTIFY_REFUSED if refused else "NotificationFailed",
            non_retryable=refused,
        )
