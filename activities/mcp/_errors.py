"""How an MCP failure reaches the workflow, decided in one place.

The server could not be reached, went away during a request, or did not answer in
time: a retryable `ApplicationError` (the workflow's retry policy for the tool's policy
decides what follows; its `type` says whether the call may have reached the server).
A JSON-RPC error answer that a retry cannot fix (no such tool, invalid parameters) is
the model's to handle: it becomes an error result, not an exception.
"""

from __future__ import annotations

from typing import cast

from temporalio.exceptions import ApplicationError

# JSON-RPC's codes and the MCP SDK's own two, spelled here so that importing this package
# does not import the SDK (over a second): the workflow imports it for activity references.
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
CONNECTION_CLOSED = -32000
REQUEST_TIMEOUT = -32001

# The call was never sent: nothing happened on the server.
UNAVAILABLE = "McpServerUnavailable"
# The call was sent and no answer came: it may have taken effect.
CONNECTION_LOST = "McpConnectionLost"
TIMED_OUT = "McpTimeout"
ERROR_ANSWER = "McpErrorAnswer"

# Error answers about the request itself: the model can correct it, a retry cannot.
REQUEST_ERRORS = frozenset({INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND})


def one_line(err: BaseException) -> str:
    """The innermost cause's message on one line (transport failures arrive as groups)."""
    while isinstance(err, BaseExceptionGroup):  # never empty: the constructor refuses that
        err = cast("BaseExceptionGroup[BaseException]", err).exceptions[0]
    text = " ".join(str(err).split()) or type(err).__name__
    return text[:300]


def unreachable(server: str, err: BaseException) -> ApplicationError:
    return ApplicationError(f"MCP server {server} cannot be reached: {one_line(err)}", type=UNAVAILABLE)


def timed_out(server: str, what: str, seconds: float) -> ApplicationError:
    return ApplicationError(f"MCP server {server}: no answer to {what} within {seconds:g} s", type=TIMED_OUT)


def lost(server: str, what: str, err: BaseException) -> ApplicationError:
    return ApplicationError(
        f"MCP server {server}: the connection was lost during {what}: {one_line(err)}", type=CONNECTION_LOST
    )


def classify(server: str, what: str, seconds: float, err: Exception, code: int) -> ApplicationError:
    """An `MCPError` from the client: the connection's, a timeout, or the server's answer."""
    if code == CONNECTION_CLOSED:
        return lost(server, what, err)
    if code == REQUEST_TIMEOUT:
        return timed_out(server, what, seconds)
    return ApplicationError(
        f"MCP server {server} answered {what} with error {code}: {one_line(err)}",
        code,
        type=ERROR_ANSWER,
    )


def invalid_answer(server: str, what: str, err: BaseException) -> ApplicationError:
    # The same request gets the same malformed answer: retrying only costs time.
    return ApplicationError(
        f"MCP server {server} sent an answer to {what} that is not valid MCP: {one_line(err)}",
        type=ERROR_ANSWER,
        non_retryable=True,
    )
