"""Typed answers: a session whose input has an `output_schema` answers JSON that validates.

The model gives its answer by calling one more tool, `final_answer`, whose input schema
is the output schema (an object schema as it is; any other schema as the one property
`answer` of an object, since both providers take only object schemas for a tool's input).
The call runs no activity: the workflow validates the input against the schema, and a
valid answer is the session's `output` (its `answer` is the same JSON as text) and ends
the run once the response's other calls have their results. An invalid answer goes back
to the model as the call's error result, with the validation error; a plain text answer
is accepted when it is JSON that validates, and otherwise answered with a message that
says how to answer. After `MAX_INVALID_ANSWERS` invalid answers the session is `failed`,
saying why. The same tool works on every provider, whatever the schema says (open
objects, unions, references): nothing depends on a provider's native structured output.

`check_schema` is what the start input's resolution runs on a schema: a schema that is
not valid JSON Schema (Draft 2020-12) is refused with one line before anything starts.
"""

from __future__ import annotations

import json
from typing import Any, cast

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import (
        SchemaError,
        ValidationError,
        best_match,  # pyright: ignore[reportUnknownVariableType]: its stub leaves the return untyped
    )
    from jsonschema.protocols import Validator

    from activities.wire import Message, ModelReply, TextBlock, ToolSpec
    from workflows.contract import ToolCallRecord
    from workflows.outcomes import Finished
    from workflows.session import Session

FINAL_ANSWER = "final_answer"
WRAPPED = "answer"  # the property that holds an answer whose schema is not an object's
MAX_INVALID_ANSWERS = 3
DEFINITIONS = ("$defs", "definitions", "$schema", "$id")  # stay at the top when wrapped
INSTRUCTION = (
    f"When you have the final answer, give it by calling the {FINAL_ANSWER} tool (its input is "
    "the answer, as JSON that matches the tool's schema), not as text."
)


def check_schema(schema: Any) -> str | None:
    """Why `schema` cannot be an output schema, in one line; None when it can."""
    if not isinstance(schema, dict):
        return f"the output schema must be a JSON object (a JSON Schema), not {type(schema).__name__}"
    try:
        Draft202012Validator.check_schema(cast("dict[str, Any]", schema))
    except SchemaError as err:
        where = "/".join(str(p) for p in err.absolute_path) or "the top"
        return f"the output schema is not valid JSON Schema: at {where}: {_short(err.message)}"
    return None


def wraps(schema: dict[str, Any]) -> bool:
    """Whether the answer travels as the `answer` property of the tool's input."""
    return schema.get("type") != "object"


def answer_spec(schema: dict[str, Any]) -> ToolSpec:
    """The `final_answer` tool the model sees."""
    if wraps(schema):
        inner = {k: v for k, v in schema.items() if k not in DEFINITIONS}
        kept = {k: v for k, v in schema.items() if k in DEFINITIONS}
        input_schema = {
            **kept, "type": "object", "properties": {WRAPPED: inner}, "required": [WRAPPED],
            "additionalProperties": False,
        }  # fmt: skip
        what = f"the answer, as the `{WRAPPED}` property"
    else:
        input_schema, what = schema, "the answer itself"
    return ToolSpec(
        name=FINAL_ANSWER,
        description=(
            f"Give the final answer. Call it once, when you have the answer; its input is {what}, "
            "and must match the schema. An answer that does not match comes back with the error: "
            "correct it and call again."
        ),
        input_schema=input_schema,
        policy="read_only",
    )


def problem(schema: dict[str, Any], value: Any) -> str | None:
    """Why `value` does not match `schema`, in one line; None when it does."""
    validator = cast("Validator", Draft202012Validator(schema))  # its stub is partly untyped
    found = cast("ValidationError | None", best_match(validator.iter_errors(value)))
    if found is None:
        return None
    where = found.json_path if found.absolute_path else "the answer"
    return f"at {where}: {_short(found.message)}"


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class TypedAnswers:
    """What the loop asks of a session with an output schema."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.state = session.state
        schema = session.input.output_schema
        assert schema is not None
        self.schema = schema
        self._last: str | None = None  # the latest validation error, for the failure's text

    def take_call(self, call: ToolCallRecord) -> tuple[bool, str]:
        """A `final_answer` call checked: (valid, the result the model gets)."""
        value = call.input.get(WRAPPED) if wraps(self.schema) else call.input
        if wraps(self.schema) and WRAPPED not in call.input:
            why: str | None = f"the input has no `{WRAPPED}` property; the answer goes there"
        else:
            why = problem(self.schema, value)
        if why is not None:
            self.state.invalid_answers += 1
            self._last = why
            return False, self._invalid(why)
        if not self.state.has_output:
            self._accept(value)
        return True, "accepted: this is the final answer"

    def after_tools(self) -> None:
        """After a response's calls: end the run on an accepted answer, or on too many invalid ones."""
        if self.state.has_output:
            raise Finished("completed")
        self._check_count()

    def text_answer(self, reply: ModelReply) -> None:
        """A response without calls: accepted if its text is JSON that validates; else the
        model is told how to answer, and the loop calls it again."""
        text = reply.message.text().strip()
        try:
            value = json.loads(_unfenced(text))
        except ValueError:
            why = f"the answer is not JSON; call {FINAL_ANSWER} with it"
        else:
            found = problem(self.schema, value)
            if found is None:
                self._accept(value)
                raise Finished("completed")
            why = found
        self.state.invalid_answers += 1
        self._last = why
        self._check_count()
        note = Message(role="user", content=[TextBlock(text=self._invalid(why))])
        self.state.append(note, sent=False)
        self.session.view.changed()

    def _accept(self, value: Any) -> None:
        self.state.output, self.state.has_output = value, True
        self.state.answer = json.dumps(value, ensure_ascii=False)
        self.session.view.changed()

    def _invalid(self, why: str) -> str:
        left = MAX_INVALID_ANSWERS - self.state.invalid_answers
        return (
            f"The answer does not match the output schema: {why}. Call {FINAL_ANSWER} again with a "
            f"corrected answer ({left} more invalid {'answer' if left == 1 else 'answers'} end the session)."
        )

    def _check_count(self) -> None:
        if self.state.invalid_answers >= MAX_INVALID_ANSWERS:
            last = f"; the last: {self._last}" if self._last else ""
            raise Finished(
                "failed",
                error=f"the model gave {self.state.invalid_answers} answers that do not match the output schema{last}",
            )


def _unfenced(text: str) -> str:
    """The text without a Markdown code fence around it (```json ... ```)."""
    if text.startswith("```") and text.endswith("```"):
        first = text.find("\n")
        return text[first + 1 : -3] if first != -1 else text[3:-3]
    return text
