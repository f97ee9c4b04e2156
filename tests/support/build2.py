"""A second build of the session workflow for the deploy tests: the same workflow type
("AgentWorkflow") with one change that emits a new command, behind `workflow.patched()`.

After every recorded model reply, new code upserts the memo `recorded_by: build-2`. A
session started on build 1 and moved to build 2 replays its old steps without the patch
(no marker in its history there) and takes the new path from its first step on build 2.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from pydantic import ValidationError

    from activities.wire import ModelReply
    from workflows.agent import AgentWorkflow
    from workflows.contract import SessionInput, SessionStatus
    from workflows.model_calls import ModelCaller

PATCH = "memo-recorded-by"
MEMO_KEY = "recorded_by"


class Build2ModelCaller(ModelCaller):
    def record(self, reply: ModelReply) -> None:
        super().record(reply)
        if workflow.patched(PATCH):
            workflow.upsert_memo({MEMO_KEY: "build-2"})


@workflow.defn(name="AgentWorkflow", failure_exception_types=[ValidationError])
class AgentWorkflowBuild2(AgentWorkflow):
    @workflow.init
    def __init__(self, input: SessionInput) -> None:
        super().__init__(input)
        self.model = Build2ModelCaller(self.session)

    @workflow.run
    async def run(self, input: SessionInput) -> SessionStatus:
        return await super().run(input)
