"""The workflows that run Pydantic AI's `TemporalAgent` for one session (without and with an event stream handler)."""

from __future__ import annotations

from dataclasses import dataclass

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from pydantic_ai.usage import UsageLimits

    from bench.pai import temporal_agent, temporal_agent_stream


@dataclass
class PaiInput:
    goal: str
    session: str


@workflow.defn(name="PydanticAIBenchWorkflow")
class PydanticAIBenchWorkflow:
    @workflow.run
    async def run(self, input: PaiInput) -> str:
        result = await temporal_agent.run(
            input.goal,
            model_settings={"extra_headers": {"x-agent-session": input.session}},
            # Its default stops a run at 50 model requests; the sessions here make up to 201.
            usage_limits=UsageLimits(request_limit=None),
        )
        return result.output


@workflow.defn(name="PydanticAIStreamBenchWorkflow")
class PydanticAIStreamBenchWorkflow:
    @workflow.run
    async def run(self, input: PaiInput) -> str:
        result = await temporal_agent_stream.run(
            input.goal,
            model_settings={"extra_headers": {"x-agent-session": input.session}},
            usage_limits=UsageLimits(request_limit=None),
        )
        return result.output
