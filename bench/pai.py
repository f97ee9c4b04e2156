"""Pydantic AI's Temporal integration (`TemporalAgent`) on the fake server, with the same tool.

Imported by the worker process only when the `bench` extra is installed. The fake
server's URL comes from `BENCH_FAKE_URL`, read once when the worker imports this module
(outside the workflow sandbox). The session id goes to the fake server as the
`x-agent-session` header through the model settings, as for the other contenders.

`temporal_agent_stream` is the same agent with an event stream handler (the economy
scenario): its model activity then streams the answer and hands each event to the
handler, which reads them as a follower would and keeps nothing.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import AsyncIterable
from typing import Any

from anthropic import AsyncAnthropic
from pydantic_ai import Agent
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.providers.anthropic import AnthropicProvider

from bench.common import MODEL, SMALL_OUTPUT, SYSTEM, lookup_text

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from pydantic_ai.durable_exec.temporal import TemporalAgent

FAKE_URL = os.environ.get("BENCH_FAKE_URL", "http://127.0.0.1:9")


def lookup(query: str, size: int = SMALL_OUTPUT) -> str:
    """Look up a query and return what is known about it."""
    return lookup_text(query, size)


model = AnthropicModel(
    MODEL,
    provider=AnthropicProvider(
        anthropic_client=AsyncAnthropic(base_url=FAKE_URL, api_key="bench-key", max_retries=0)
    ),
)
agent = Agent(model, name="bench_agent", instructions=SYSTEM, tools=[lookup])
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    temporal_agent = TemporalAgent(agent)


async def read_events(ctx: Any, events: AsyncIterable[Any]) -> None:
    """The event stream handler: reads every event, keeps nothing."""
    async for _ in events:
        pass


with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    temporal_agent_stream = TemporalAgent(agent, name="bench_agent_stream", event_stream_handler=read_events)
