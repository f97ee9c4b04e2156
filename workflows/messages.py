"""Messages a person sends a working session (`send_message`), and when the model gets them.

`queue` (a chat's default, and its only mode before steering) waits for the run's answer:
the message starts the next run. `steer` (the default of a session that is not a chat) goes
to the model's next call in the current run, as a user text block after the pending tool
results, in the same user turn; the model sees it in the very next request that starts
after the send. A steer still pending when the model answers without tools makes one more
model call in the same run, so it is never lost; it does not start a run, so the session's
`tool_choice` is not applied again. A steer to a paused session is delivered when it
resumes (the loop waits first); one sent to a chat waiting for input starts its next run,
as a queued message does. Each delivery publishes `message_delivered {id, step}`.

`interrupt` first cuts short the work in flight (`AgentWorkflow._interrupt`, with the steps
of a stop, workflows/stopping.py): the running model call is closed where it runs and its
reply never recorded; running read-only and idempotent tools (and sub-agents, waits) are
cancelled; a running at-most-once tool ends and keeps its result; a call waiting for
approval is denied with the reason `INTERRUPTED`, and one not yet started does not run.
Then the message is delivered as a steer is: the next user turn, with the calls' results.
With nothing in flight it is a steer.

Message ids count every message of every mode, from the goal's 1 (`last_message_id`).
Pending messages are bounded (`MAX_PENDING` messages, `MAX_PENDING_BYTES` of UTF-8 text in
all): one more is refused by the update's validator, so at every door (HTTP's 409 with the
reason, MCP, A2A, the command line) and before anything is recorded.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.wire import ContentBlock, Message, TextBlock
    from workflows.contract import MessageMode, UserMessage
    from workflows.events import MessageDelivered
    from workflows.records import PendingMessage
    from workflows.session import Session

MAX_PENDING = 20
MAX_PENDING_BYTES = 1_000_000  # 1 MB
# Why a call waiting for approval was denied, and a call not yet started did not run.
INTERRUPTED = "interrupted by a new message"


def mode_of(session: Session, message: UserMessage) -> MessageMode:
    return message.mode or ("queue" if session.input.chat else "steer")


def check_send(session: Session, message: UserMessage) -> None:
    session.refuse_if_finished("take a message")
    state = session.state
    if mode_of(session, message) == "queue" and not session.input.chat:
        raise ValueError(
            f"session {session.id} is not a chat session: a queued message waits for a next run it "
            "will not have; send it with mode steer"
        )
    if state.closing:
        raise ValueError(f"session {session.id} is closing; it takes no more messages")
    if len(state.pending) >= MAX_PENDING:
        raise ValueError(f"session {session.id} already holds {MAX_PENDING} messages the model has not had")
    held = sum(len(m.text.encode()) for m in state.pending)
    size = len(message.text.encode())
    if held + size > MAX_PENDING_BYTES:
        raise ValueError(
            f"session {session.id}'s pending messages already hold {held} bytes and this one has {size}; "
            f"at most {MAX_PENDING_BYTES} (1 MB) together"
        )


def send(session: Session, message: UserMessage) -> int:
    """Keep the message for the model; its id (the goal is 1)."""
    state = session.state
    last = state.last_message_id
    if last is None:  # as sessions before the count kept it: the turns taken and those waiting
        last = state.user_turns + len(state.pending)
    state.last_message_id = last + 1
    state.pending.append(
        PendingMessage(id=last + 1, mode=mode_of(session, message), text=message.text, sent_at=workflow.now())
    )
    session.view.changed()
    return last + 1


def deliver_steers(session: Session) -> None:
    """Before a model call: the pending steers and interrupts join the user turn it answers
    (after the tool results) or make one of their own after an answer."""
    state = session.state
    steers = state.for_this_run()
    if not steers:
        return
    blocks: list[ContentBlock] = [TextBlock(text=m.text) for m in steers]
    # Joined to a person's message (the goal, when an interrupt cut the run's first call
    # short), the call still starts the run; joined to tool results, it does not.
    starts_run = state.next_call_starts_run()
    last = state.messages[-1]
    if last.role == "user":  # not yet sent: the tool results (or a message) the call answers
        joined = Message(role="user", content=[*last.content, *blocks])
        state.messages[-1] = joined
        state.unsent = [*state.unsent[:-1], joined] if state.unsent else [joined]
    else:
        state.append(Message(role="user", content=blocks), sent=False)
    state.pending = [m for m in state.pending if m.mode == "queue"]
    state.steered = not starts_run
    for message in steers:
        session.view.publish(MessageDelivered(id=message.id, step=state.steps + 1))
    session.view.changed()


def take_next(session: Session) -> PendingMessage | None:
    """Between runs: the oldest pending message, which starts the next run."""
    state = session.state
    if not state.pending:
        return None
    message = state.pending.pop(0)
    session.view.publish(MessageDelivered(id=message.id, step=state.steps + 1))
    return message
