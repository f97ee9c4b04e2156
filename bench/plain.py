"""`python -m bench.plain FAKE_URL`: the plain in-process loop, no durability.

The same `anthropic` client against the same fake server, the same tool, the same
loop (call the model, run the tools it asks for, send the results, until it answers).
It reads one JSON command per line on stdin, `{"sessions": [[id, steps, size], ...]}`,
runs those sessions concurrently and prints one JSON line: the transcript size of each.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import anthropic

from bench.common import GOAL, MODEL, SYSTEM, TOOL_DESCRIPTION, TOOL_NAME, TOOL_SCHEMA, lookup_text

TOOLS = {TOOL_NAME: lookup_text}


async def run_session(client: anthropic.AsyncAnthropic, session: str) -> int:
    messages: list[dict[str, Any]] = [{"role": "user", "content": GOAL}]
    spec = {"name": TOOL_NAME, "description": TOOL_DESCRIPTION, "input_schema": TOOL_SCHEMA}
    while True:
        reply = await client.messages.create(
            model=MODEL,
            max_tokens=4096,
            system=SYSTEM,
            messages=messages,
            tools=[spec],
            extra_headers={"x-agent-session": session},
        )
        content = [b.model_dump(mode="json", exclude_none=True) for b in reply.content]
        messages.append({"role": "assistant", "content": content})
        uses = [b for b in reply.content if b.type == "tool_use"]
        if not uses:
            return len(json.dumps(messages, ensure_ascii=False).encode())
        results = []
        for use in uses:
            try:
                output, error = TOOLS[use.name](**use.input), False
            except Exception as err:  # the model's to handle, as in the durable loops
                output, error = f"{type(err).__name__}: {err}", True
            results.append(
                {"type": "tool_result", "tool_use_id": use.id, "content": output, "is_error": error}
            )
        messages.append({"role": "user", "content": results})


async def main() -> None:
    client = anthropic.AsyncAnthropic(base_url=sys.argv[1], api_key="bench-key", max_retries=0)
    loop = asyncio.get_running_loop()
    print("ready", flush=True)
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            return
        command = json.loads(line)
        sessions = [s[0] for s in command["sessions"]]
        outcomes = await asyncio.gather(*(run_session(client, s) for s in sessions), return_exceptions=True)
        result = {
            "transcript_bytes": {
                s: o for s, o in zip(sessions, outcomes, strict=False) if isinstance(o, int)
            },
            "errors": {
                s: repr(o) for s, o in zip(sessions, outcomes, strict=False) if not isinstance(o, int)
            },
        }
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
