"""The typed search attributes every session carries, for `list` and the Temporal UI."""

from __future__ import annotations

from temporalio.common import SearchAttributeKey

AGENT_STATUS = SearchAttributeKey.for_keyword("AgentStatus")
AGENT_STEPS = SearchAttributeKey.for_int("AgentSteps")
AGENT_TOKENS = SearchAttributeKey.for_int("AgentTokens")
AGENT_PENDING_APPROVALS = SearchAttributeKey.for_int("AgentPendingApprovals")
AGENT_USER = SearchAttributeKey.for_keyword("AgentUser")

ALL = [AGENT_STATUS, AGENT_STEPS, AGENT_TOKENS, AGENT_PENDING_APPROVALS, AGENT_USER]
