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

`check_schema` is what the start input's resolution runs on a schema, at every door: a
schema that is not valid JSON Schema (Draft 2020-12) is refused with one line before
anything starts, and so is one whose references could lead outside it or lead nowhere: a
`$ref` or `$dynamicRef` that does not start with `#`, an `$id` below the root, or a
reference that does not resolve in the schema the model gets (after any wrapping). The
workflow validates with an empty registry (`NO_RESOURCES`): whatever an input holds, a
reference is looked up in the schema itself and nowhere else, so validating does no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
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
    from referencing import Registry
    from referencing.exceptions import Unresolvable
    from referencing.jsonschema import DRAFT202012

    from activities.wire import Message, ModelReply, TextBlock, ToolSpec
    from workflows.contract import ToolCallRecord
    from workflows.outcomes import Finished
    from workflows.session import Session

FINAL_ANSWER = "final_answer"
WRAPPED = "answer"  # the property that holds an answer whose schema is not an object's
MAX_INVALID_ANSWERS = 3
DEFINITIONS = ("$defs", "definitions", "$schema", "$id")  # stay at the top when wrapped
REFERENCES = ("$ref", "$dynamicRef")
# No resource but the schema itself (and the meta-schemas jsonschema keeps in memory):
# jsonschema's default registry would fetch an unknown URL with urlopen.
NO_RESOURCES: Registry[Any] = Registry()
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
    return reference_problem(cast("dict[str, Any]", schema))


def reference_problem(schema: dict[str, Any]) -> str | None:
    """Why the schema's references could reach outside it, or lead nowhere in the schema
    the model gets; None when every one resolves inside it."""
    sent = answer_spec(schema).input_schema
    resolver = NO_RESOURCES.resolver_with_root(DRAFT202012.create_resource(sent))
    for where, key, value in _keywords(sent, ""):
        if key == "$id" and where:
            return (
                f"the output schema has an $id below its root (at {where}): every $ref must resolve inside "
                "the schema, so only the root may name itself"
            )
        if key not in REFERENCES:
            continue
        if not value.startswith("#"):
            return (
                f"the output schema's {key} {_short(value, 120)!r} (at {where or 'the top'}) does not start "
                "with '#': a $ref may only point inside the schema"
            )
        try:
            resolver.lookup(value)
        except Unresolvable:
            sent_as = (
                f" as the model gets it (the answer is its `{WRAPPED}` property)" if wraps(schema) else ""
            )
            return (
                f"the output schema's {key} {_short(value, 120)!r} (at {where}) does not resolve in the "
                f"schema{sent_as}"
            )
    return None


def _keywords(node: Any, where: str) -> Iterator[tuple[str, str, str]]:
    """(where, key, value) of every `$id`, `$ref` and `$dynamicRef` with a string value,
    anywhere in the schema; `where` is a JSON pointer to the object that holds it."""
    if isinstance(node, dict):
        for key, value in cast("dict[str, Any]", node).items():
            if key in ("$id", *REFERENCES) and isinstance(value, str):
                yield where, key, value
            else:
                yield from _keywords(value, f"{where}/{_escaped(key)}")
    elif isinstance(node, list):
        for index, value in enumerate(cast("list[Any]", node)):
            yield from _keywords(value, f"{where}/{index}")


def _escaped(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


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


class UnusableSchema(Exception):
    """The schema has a reference that does not resolve inside it: no answer can match."""


def problem(schema: dict[str, Any], value: Any) -> str | None:
    """Why `value` does not match `schema`, in one line; None when it does. A reference
    that does not resolve inside the schema is `UnusableSchema`: nothing is fetched."""
    # its stub is partly untyped
    validator = cast("Validator", Draft202012Validator(schema, registry=NO_RESOURCES))
    try:
        found = cast("ValidationError | None", best_match(validator.iter_errors(value)))
    except Unresolvable as err:
        raise UnusableSchema(
            f"the output schema cannot be used: a $ref does not resolve inside it ({_short(str(err), 200)})"
        ) from None
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
        self._unusable: str | None = None  # why no answer can match (a reference leads nowhere)

    def take_call(self, call: ToolCallRecord) -> tuple[bool, str]:
        """A `final_answer` call checked: (valid, the result the model gets)."""
        value = call.input.get(WRAPPED) if wraps(self.schema) else call.input
        if wraps(self.schema) and WRAPPED not in call.input:
            why: str | None = f"the input has no `{WRAPPED}` property; the answer goes there"
        else:
            try:
                why = problem(self.schema, value)
            except UnusableSchema as err:
                self._unusable = str(err)
                return False, self._unusable
        if why is not None:
            self.state.invalid_answers += 1
            self._last = why
            return False, self._invalid(why)
        if not self.state.has_output:
            self._accept(value)
        return True, "accepted: this is the final answer"

    def after_tools(self) -> None:
        """After a response's calls: end the run on an accepted answer, on a schema no
        answer can match, or on too many invalid answers."""
        if self.state.has_output:
            raise Finished("completed")
        if self._unusable is not None:
            raise Finished("failed", error=self._unusable)
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
            try:
                found = problem(self.schema, value)
            except UnusableSchema as err:
                raise Finished("failed", error=str(err)) from None
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
