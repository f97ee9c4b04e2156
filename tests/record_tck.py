"""`python -m tests.record_tck REPORTS --commit SHA`: record a hand run of the A2A TCK
(github.com/a2aproject/a2a-tck) for docs/generated/reliability.md.

The TCK lives on GitHub, not on a registry, so the tests cannot fetch it; a person runs
it against a running `api.py` and worker (docs/reference/conformance.md says how) and this
program reads the reports it wrote (`REPORTS/*_jsonrpc_results.json`, pytest-json-report)
into docs/generated/a2a-tck.json, which tests/support/reliability.py renders. Each failure
is put in one of three kinds, by its test's name:

- `suite`: the TCK's own problem, with why (`SUITE`);
- `pending`: this project's, being fixed elsewhere, with what (`PENDING`);
- `project`: this project's, not yet explained: the program names them and exits 1.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "generated" / "a2a-tck.json"
CATEGORIES = ("mandatory", "capabilities", "transport-equivalence", "quality", "features")

WORKING = (
    "expects the task still WORKING after a blocking SendMessage; A2A 1.0 (3.1.1) has a blocking "
    "send return once the task is terminal or interrupted, and this agent's task had completed"
)
ENDED = (
    "expects a message to a completed task to succeed; A2A 1.0 (3.1.1, 3.3.4) says a terminal task "
    "takes no more messages: this agent answers UnsupportedOperationError (-32004)"
)
HEADERLESS_CARD = (
    "fetches the agent card without A2A-Version, then reads it as 1.0's; A2A 1.0 (3.6.2) says no header "
    "means 0.3, and this agent answers the 0.3 card (the same tests pass when the fetch sends "
    "A2A-Version: 1.0)"
)
SUITE = {
    "test_core_method_mapping_compliance": f"cancels the task its blocking send created: {WORKING}",
    "test_tasks_cancel_valid": f"cancels the task its blocking send created: {WORKING}",
    "test_task_cancel_state_handling": f"cancels the task its blocking send created: {WORKING}",
    "test_task_state_transitions": WORKING,
    "test_message_send_continue_task": ENDED,
    "test_task_history_length": ENDED,
    "test_message_send_continue_with_contextid": ENDED,
    "test_partial_update_recovery": ENDED,
    "test_security_scheme_structure_compliance": HEADERLESS_CARD,
    "test_authentication_scheme_consistency": HEADERLESS_CARD,
    "test_security_scheme_consistency": HEADERLESS_CARD,
    "test_invalid_authentication": HEADERLESS_CARD,
    "test_public_agent_card_access_control": (
        "asks for the card under the JSON-RPC URL (/a2a/.well-known/agent-card.json); A2A 1.0 (8.2) puts it "
        "at the domain's /.well-known/agent-card.json, where it answers 200 without a token"
    ),
    "test_sensitive_information_protection": (
        "flags 127.0.0.1 in the card of an agent run on loopback, and the word 'token' in the bearer scheme's "
        "description; the card names no secret"
    ),
    "test_push_notification_not_supported_error_32003_enhanced": (
        "a TypeError in the TCK's own helper (transport_create_task_push_notification_config() takes from 2 "
        "to 3 positional arguments but 4 were given): no request is sent"
    ),
    "test_tasks_subscribe_nonexistent": (
        "demands an event stream for an error answer; the agent answers SubscribeToTask of an unknown task "
        "with a JSON-RPC error (TaskNotFoundError), as JSON"
    ),
    "test_binary_data_handling": (
        "its assertion is inverted: it asserts the error code is -32601 (method not found) under the comment "
        "'should not be method not found'; the agent refused the file part with -32602 (its bytes are text, "
        "declared application/octet-stream)"
    ),
}
# ListTasks: its parameters and paging are being rebuilt for every door (an unknown
# contextId, invalid pageSize/pageToken/status/historyLength, a cursor and totalSize).
LIST_TASKS = "ListTasks: its parameters and paging are being rebuilt for every door"
LIST_TASKS_WORKING = f"{WORKING} (a ListTasks test: run again once ListTasks paging lands)"
PENDING = {
    "test_list_tasks_empty_when_none_exist": f"{LIST_TASKS}: an unknown contextId answers TaskNotFound, not an empty list",
    "test_invalid_page_token_error": f"{LIST_TASKS}: a malformed pageToken is accepted",
    "test_invalid_status_error": f"{LIST_TASKS}: an unknown status is accepted",
    "test_negative_page_size_error": f"{LIST_TASKS}: pageSize -1 is accepted",
    "test_zero_page_size_error": f"{LIST_TASKS}: pageSize 0 is accepted",
    "test_out_of_range_page_size_error": f"{LIST_TASKS}: pageSize 101 is accepted",
    "test_negative_history_length_error": f"{LIST_TASKS}: historyLength -1 is accepted",
}
LIST_TASKS_CLASSES = {"TestBasicListing", "TestFiltering", "TestPagination", "TestHistoryLimiting",
                      "TestArtifactInclusion", "TestEdgeCasesAndErrors"}  # fmt: skip


def classify(nodeid: str, message: str) -> tuple[str, str]:
    """(kind, why) of one failed test."""
    parts = nodeid.split("::")
    name = parts[-1].split("[")[0]
    if name in PENDING:
        return "pending", PENDING[name]
    if name in SUITE:
        return "suite", SUITE[name]
    if "did not reach WORKING state" in message and set(parts) & LIST_TASKS_CLASSES:
        return "suite", LIST_TASKS_WORKING
    return "project", "not explained"


def _message(test: dict) -> str:
    for phase in ("setup", "call"):
        found = test.get(phase) or {}
        if found.get("outcome") in ("failed", "error"):
            return ((found.get("crash") or {}).get("message") or "").splitlines()[0][:300]
    return ""


def read(reports: Path) -> dict:
    categories: dict[str, dict[str, int]] = {}
    failures: list[dict[str, str]] = []
    for category in CATEGORIES:
        path = reports / f"{category}_jsonrpc_results.json"
        if not path.exists():
            continue
        report = json.loads(path.read_text())
        summary = report["summary"]
        categories[category] = {
            k: summary.get(k, 0) for k in ("passed", "failed", "skipped", "xfailed", "error")
        }
        for test in report["tests"]:
            if test["outcome"] not in ("failed", "error"):
                continue
            message = _message(test)
            kind, why = classify(test["nodeid"], message)
            failures.append(
                {"category": category, "test": test["nodeid"], "kind": kind, "why": why, "message": message}
            )
    return {"categories": categories, "failures": failures}


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.record_tck", description=(__doc__ or "").partition("\n\n")[0]
    )
    parser.add_argument("reports", type=Path, help="the TCK's reports folder (a2a-tck/reports)")
    parser.add_argument("--commit", required=True, help="the a2a-tck commit that ran")
    parser.add_argument("--command", default="", help="how it was run (recorded as given)")
    args = parser.parse_args()
    found = read(args.reports)
    if not found["categories"]:
        print(f"error: no *_jsonrpc_results.json in {args.reports}", file=sys.stderr)
        return 1
    record = {
        "suite": "a2a-tck", "commit": args.commit, "command": args.command,
        "ran": time.strftime("%Y-%m-%d", time.gmtime()), **found,
    }  # fmt: skip
    OUT.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    unexplained = [f for f in found["failures"] if f["kind"] == "project"]
    for failure in unexplained:
        print(f"not explained: {failure['test']}: {failure['message']}", file=sys.stderr)
    print(
        f"wrote {OUT.relative_to(ROOT)}: "
        + ", ".join(f"{c} {v['passed']} passed, {v['failed']} failed" for c, v in found["categories"].items())
    )
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
