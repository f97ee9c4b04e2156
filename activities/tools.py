"""Typed tools: declared once as a Python function, run as Temporal activities.

A tool is a function whose parameters are pydantic-typed and whose docstring the model
reads. `@tool(...)` turns it into a `Tool` with a generated JSON Schema and a policy.
`ToolActivities(tools)` exposes the activities a worker registers: `describe_tools`,
`check_tool_input` and `run_tool`. Bad input, unknown tools and exceptions come back as
`is_error` outcomes the model can react to; only infrastructure failures raise.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, create_model
from temporalio import activity

from activities.attempt_telemetry import tool_call_telemetry
from activities.heartbeat import Heartbeats
from activities.stopping import RunningCall, stoppable
from activities.transcript import TranscriptStore, open_store
from activities.wire import ToolOutcome, ToolRequest, ToolSpec
from infra.policy import ToolPolicy

INLINE_OUTPUT_CHARS = 1024


@dataclass(frozen=True)
class ToolContext:
    """What a tool knows of the session it runs for. The user comes from the session, never the model."""

    session_id: str
    user_id: str
    tool_use_id: str
    idempotency_key: str
    # The memory workflow of the session's user (activities/memory.py); None without one.
    memory_scope: str | None = None
    _beats: Heartbeats | None = field(default=None, repr=False, compare=False)
    _call: RunningCall | None = field(default=None, repr=False, compare=False)

    @property
    def cancelled(self) -> bool:
        """Whether the call was stopped: its session was cancelled or timed out while it ran.
        An `async` tool is also cancelled at its next `await`; a synchronous one (in its
        thread, which Python cannot stop) checks this between steps and returns early: its
        result is discarded. Never true for an at-most-once tool, which runs to its end."""
        if self._call is not None and self._call.stopped:
            return True
        return activity.in_activity() and activity.is_cancelled()

    def heartbeat(self, *details: Any) -> None:
        """Report progress; also how a long tool learns that it was cancelled. Sent at most
        once a second (activities/heartbeat.py); safe to call from a synchronous tool's thread."""
        if self._beats is not None:
            self._beats.beat(*details)
        elif activity.in_activity() and not activity.info().is_local:
            activity.heartbeat(*details)


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class Tool:
    func: Callable[..., Any]
    spec: ToolSpec
    args_model: type[BaseModel]
    wants_context: bool

    @property
    def name(self) -> str:
        return self.spec.name

    def parse(self, raw: dict[str, Any]) -> BaseModel:
        return self.args_model.model_validate(raw)

    async def call(self, args: BaseModel, ctx: ToolContext) -> Any:
        kwargs = {name: getattr(args, name) for name in type(args).model_fields}
        if self.wants_context:
            kwargs["ctx"] = ctx
        if inspect.iscoroutinefunction(self.func):
            return await self.func(**kwargs)
        return await asyncio.to_thread(self.func, **kwargs)


# A tool runs as a local activity by default when it is retry-safe, needs no approval and
# its timeout is at most this: a step is then one workflow task instead of two (the tool
# runs inside the task that received the model's reply; bench/analysis.md). A local
# activity holds its workflow task open while it runs, and a worker killed during one is
# noticed at the workflow task's timeout (10 s), so only short tools qualify.
LOCAL_UP_TO_S = 10.0
DEFAULT_TIMEOUT_S = 10.0


def tool(
    *,
    policy: ToolPolicy = "idempotent",
    requires_approval: bool = False,
    local: bool | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    name: str | None = None,
) -> Callable[[Callable[..., Any]], Tool]:
    """Declare a tool. Parameters become its JSON Schema; the docstring its description.

    `timeout` bounds one attempt, in seconds (default 10). `local` unset runs the tool as a
    local activity (no extra workflow task) when it is read-only or idempotent, needs no
    approval and its timeout is at most `LOCAL_UP_TO_S`; `local=False` keeps it a regular
    activity; `local=True` asks for a local activity whatever the timeout.
    """
    if isinstance(timeout, bool) or not (isinstance(timeout, int | float) and 0 < timeout < float("inf")):  # pyright: ignore[reportUnnecessaryIsInstance]  (a caller's value)
        raise TypeError(f"a tool's timeout is a positive number of seconds, not {timeout!r}")
    retry_safe = policy != "at_most_once" and not requires_approval
    if local and not retry_safe:
        raise TypeError("only read-only or idempotent tools without approval can run as local activities")
    if local is None:
        local = retry_safe and timeout <= LOCAL_UP_TO_S

    def wrap(func: Callable[..., Any]) -> Tool:
        tool_name = name or func.__name__
        signature = inspect.signature(func)
        hints = typing.get_type_hints(func, include_extras=True)
        fields: dict[str, Any] = {}
        wants_context = False
        for param in signature.parameters.values():
            if param.name == "ctx":
                wants_context = True
                continue
            if param.name not in hints:
                raise TypeError(f"tool {tool_name}: parameter {param.name!r} needs a type")
            default = ... if param.default is inspect.Parameter.empty else param.default
            fields[param.name] = (hints[param.name], default)
        args_model = create_model(f"{tool_name}_input", __base__=_Args, **fields)
        schema = args_model.model_json_schema()
        schema.pop("title", None)
        for prop in schema.get("properties", {}).values():
            prop.pop("title", None)
        description = inspect.cleandoc(func.__doc__ or "").strip()
        if not description:
            raise TypeError(f"tool {tool_name}: the docstring is what the model reads; write one")
        spec = ToolSpec(
            name=tool_name,
            description=description,
            input_schema=schema,
            policy=policy,
            requires_approval=requires_approval,
            local=local,
            timeout_seconds=float(timeout),
        )
        return Tool(func=func, spec=spec, args_model=args_model, wants_context=wants_context)

    return wrap


def describe_validation_error(tool_name: str, err: ValidationError) -> str:
    problems: list[str] = []
    for issue in err.errors():
        where = ".".join(str(p) for p in issue["loc"]) or "input"
        problems.append(f"{where}: {issue['msg']}")
    return f"invalid input for {tool_name}: " + "; ".join(problems)


def render_output(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return f"[binary output, {len(value)} bytes, not shown]"
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    return json.dumps(value, default=str, ensure_ascii=False)


def truncate(text: str, limit: int) -> tuple[str, int]:
    if len(text) <= limit:
        return text, 0
    cut = len(text) - limit
    return f"{text[:limit]}\n[truncated {cut} of {len(text)} characters; narrow the request]", cut


async def finish_outcome(
    store: TranscriptStore,
    content: str,
    *,
    is_error: bool,
    max_output: int,
    started: float,
    heartbeats: int = 0,
) -> ToolOutcome:
    """A tool's text as history records it: UTF-8 safe, cut to `max_output`, stored when long;
    with the attempt that ran it and the heartbeats the call sent."""
    # Text decoded with surrogateescape (file names, subprocess output) cannot be
    # encoded as UTF-8 for history: escape those characters, or the result never arrives.
    content = content.encode("utf-8", "backslashreplace").decode("utf-8")
    content, cut = truncate(content, max_output)
    return ToolOutcome(
        content=content,
        # The next model call names a long output by reference: history holds it once.
        content_ref=await store.put_blob(content) if len(content) > INLINE_OUTPUT_CHARS else None,
        is_error=is_error,
        truncated_chars=cut,
        duration_ms=int((time.monotonic() - started) * 1000),
        attempt=_attempt(),
        heartbeats=heartbeats,
    )


class ToolActivities:
    """The activities that run a worker's tools."""

    def __init__(
        self, tools: Sequence[Tool], store: TranscriptStore | None = None, builtin: Sequence[Tool] = ()
    ):
        self._store = store or open_store()
        self._tools = {t.name: t for t in [*tools, *builtin]}
        if len(self._tools) != len(tools) + len(builtin):
            raise ValueError("two tools share a name")
        # Run here, never listed: the workflow offers them itself when a session names them
        # (the memory tools), so the listing every session records stays as it was.
        self._builtin = {t.name for t in builtin}

    def specs(self) -> list[ToolSpec]:
        return [t.spec for t in self._tools.values() if t.name not in self._builtin]

    def activities(self) -> list[Callable[..., Any]]:
        return [self.describe_tools, self.check_tool_input, self.run_tool]

    @activity.defn(name="describe_tools")
    async def describe_tools(self) -> list[ToolSpec]:
        """The tools this worker runs, as the workflow and the model see them."""
        return self.specs()

    @activity.defn(name="check_tool_input")
    async def check_tool_input(self, request: ToolRequest) -> str | None:
        """Validate a call's input without running it; the error message, or None."""
        found = self._tools.get(request.name)
        if found is None:
            return self._unknown(request.name)
        try:
            found.parse(request.input)
        except ValidationError as err:
            return describe_validation_error(found.name, err)
        return None

    @activity.defn(name="run_tool")
    @tool_call_telemetry
    async def run_tool(self, request: ToolRequest) -> ToolOutcome:
        """Run one tool call; its errors become an is_error outcome."""
        started = time.monotonic()
        attempt = _attempt()
        found = self._tools.get(request.name)
        if found is None:
            return ToolOutcome(content=self._unknown(request.name), is_error=True, attempt=attempt)
        try:
            args = found.parse(request.input)
        except ValidationError as err:
            return ToolOutcome(
                content=describe_validation_error(found.name, err), is_error=True, attempt=attempt
            )
        # A session that stops cancels a retry-safe tool here (activities/stopping.py).
        async with stoppable(found.spec.policy != "at_most_once") as call, Heartbeats() as beats:
            ctx = ToolContext(
                session_id=request.session_id,
                user_id=request.user_id,
                tool_use_id=request.tool_use_id,
                idempotency_key=f"{request.session_id}:{request.tool_use_id}",
                memory_scope=request.memory_scope,
                _beats=beats,
                _call=call,
            )
            try:
                value = await found.call(args, ctx)
                content, is_error = render_output(value), False
            except asyncio.CancelledError:
                raise
            except Exception as err:  # a tool's failure is the model's to handle
                content, is_error = f"{type(err).__name__}: {err}", True
        return await finish_outcome(
            self._store, content, is_error=is_error, max_output=request.max_output, started=started,
            heartbeats=beats.sent,
        )  # fmt: skip

    def _unknown(self, name: str) -> str:
        return f"unknown tool {name!r}; available tools: {', '.join(sorted(self._tools))}"


def _attempt() -> int:
    """The activity's attempt (1 when a test calls it directly)."""
    return activity.info().attempt if activity.in_activity() else 1
