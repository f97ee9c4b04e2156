"""The service's page in real headless Chromium (Debian's `chromium`, driven by Playwright):
open it with the token, start a session from the form, watch the model's text stream in,
survive a server restart without losing or repeating an event, approve an edited input
from the banner, and see the session complete. Screenshots go to test-output/."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.client import Client

from devservers import temporal_server
from devservers.fakemodel import FakeModelServer
from tests.conftest import OUTPUT, answer, tool_use
from tests.support.api import TOKENS, ApiProcess, serve_api
from tests.support.needs import CHROMIUM

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip
EMAIL = {"to": "team@example.com", "subject": "hi", "body": "x"}
EDITED = {**EMAIL, "to": "boss@example.com"}
# Streamed in 24-character chunks 0.1 s apart: about 2 s, long enough to see it grow.
FIRST = "Let me draft the email to the team first. " * 10
ANSWER = "The email has gone out to the person you chose."
PARTLY_THERE = "n => { const t = document.querySelector('#turn-1 .text'); return t && t.textContent.length > 0 && t.textContent.length < n; }"

pytestmark = pytest.mark.usefixtures("chromium_installed")  # a skip, or a failure under CI=true


@pytest_asyncio.fixture(scope="module")
async def page_model() -> AsyncIterator[FakeModelServer]:
    model = FakeModelServer().start()
    try:
        yield model
    finally:
        model.stop()


@pytest_asyncio.fixture(scope="module")
async def api(client: Client, dev_server: temporal_server.DevServer, data_dir: Path, page_model: FakeModelServer,
              tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ApiProcess]:  # fmt: skip
    # Its own fake model: the session id is the server's to choose, so the script is for "*".
    model = page_model
    model.script.set("*", [
        # 18 pieces 0.3 s apart: the page has more than 5 s to show the text while it is written.
        {**tool_use("send_email", EMAIL, id="e1", text=FIRST), "chunk_delay": 0.3},
        answer(ANSWER),
    ])  # fmt: skip
    async with serve_api(
        client, dev_server.address, model, data_dir, tmp_path_factory.mktemp("web")
    ) as server:
        yield server


async def test_start_watch_approve_an_edit_and_complete_in_chromium(api: ApiProcess):
    from playwright.async_api import async_playwright

    OUTPUT.mkdir(exist_ok=True)
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1200, "height": 900})
            decisions: list[dict] = []
            page.on(
                "request",
                lambda r: (
                    decisions.append(json.loads(r.post_data or "null"))
                    if r.url.endswith("/approve")
                    else None
                ),
            )
            await page.goto(f"{api.url}/?token={TOKENS['alice']}")
            assert page.url == f"{api.url}/"  # the token left the address bar for a cookie
            await page.wait_for_selector("#me:has-text('alice')")

            await page.fill("#goal", "Email the team that the release is out.")
            await page.select_option("#agent", "assistant")
            await page.click("#start")
            await page.wait_for_url(re.compile(r"#/s/session-"))
            session_id = page.url.split("#/s/")[1]
            text = page.locator("#turn-1 .text")
            # Partly there: the text streams in before the turn is recorded.
            await page.wait_for_function(PARTLY_THERE, arg=len(FIRST), timeout=20_000)
            await page.screenshot(path=OUTPUT / "api-page-streaming.png")

            # The server goes away and comes back: the page resumes where it was.
            api = await asyncio.to_thread(api.restart)
            banner = page.locator(".approval[data-tool-use-id='e1']")
            await banner.wait_for(timeout=30_000)
            assert await text.text_content() == FIRST
            assert json.loads(await banner.locator("textarea").input_value()) == EMAIL
            await banner.locator("textarea").fill(json.dumps(EDITED, indent=2))
            await page.screenshot(path=OUTPUT / "api-page-approval.png", full_page=True)
            await banner.locator("button.approve").click()

            final = page.locator("#final-status")
            await final.wait_for(timeout=30_000)
            assert "completed" in (await final.text_content() or "") and ANSWER in (
                await final.text_content() or ""
            )
            assert decisions == [{"tool_use_id": "e1", "input": EDITED}]
            await page.wait_for_selector("#session-status:text-is('completed')", timeout=30_000)
            await asyncio.sleep(1)  # a late answer to the approval must not turn it back
            assert await page.locator("#session-status").text_content() == "completed"
            assert await page.locator("#cancel").is_disabled()
            assert await page.locator(".approval").count() == 0
            # Each event shown once: one card per tool call, one block per step.
            assert await page.locator("#call-e1").count() == 1
            assert await page.locator("#turn-1").count() == 1 and await page.locator("#turn-2").count() == 1
            assert await page.locator("#turn-2 .text").text_content() == ANSWER
            assert "sent to" in (await page.locator("#call-e1 .output").text_content() or "")
            # The session's billable actions on Temporal Cloud, in the totals and in the list.
            await page.wait_for_selector("#totals:has-text('Temporal actions')", timeout=20_000)
            counted = re.search(
                r"· ([\d,]+) Temporal actions$", await page.locator("#totals").text_content() or ""
            )
            assert counted and int(counted[1].replace(",", "")) > 0, counted
            # Each step's own, from the trace: the first step's model call, its approval and its tool.
            per_turn = []
            for step in (1, 2):
                label = page.locator(f"#turn-{step} .turn-actions")
                await label.wait_for(timeout=20_000)
                found = re.fullmatch(r"([\d,]+) Temporal actions", await label.text_content() or "")
                assert found, await label.text_content()
                per_turn.append(int(found[1].replace(",", "")))
            assert per_turn[0] >= 3 and per_turn[1] >= 1, per_turn
            assert sum(per_turn) <= int(counted[1].replace(",", "")), (per_turn, counted[1])
            link = await page.locator("#temporal-link").get_attribute("href")
            assert link == f"http://127.0.0.1:8233/namespaces/default/workflows/{session_id}"
            await page.screenshot(path=OUTPUT / "api-page-completed.png", full_page=True)

            await page.set_viewport_size({"width": 390, "height": 844})
            await page.screenshot(path=OUTPUT / "api-page-phone.png", full_page=True)
            await page.goto(f"{api.url}/#/")
            row = page.locator(f"tr[data-session='{session_id}']")
            await row.wait_for(timeout=20_000)
            assert "completed" in (await row.text_content() or "")
            assert (await row.locator("td").all_text_contents())[6] == counted[1]  # the Actions column
            await page.screenshot(path=OUTPUT / "api-page-list-phone.png", full_page=True)
        finally:
            await browser.close()


THOUGHT = "Which words would the team read first? " * 20  # 34 chunks 0.3 s apart: 10 s
THINKING_PARTLY = "n => { const t = document.querySelector('#turn-1 .thinking'); return t && !t.hidden && t.textContent.length > 0 && t.textContent.length < n; }"


async def test_the_thinking_streams_dimmed_above_the_text(api: ApiProcess, page_model: FakeModelServer):
    from playwright.async_api import async_playwright

    session_id = f"session-think-{uuid.uuid4().hex[:8]}"
    page_model.script.set(session_id, [{"thinking": THOUGHT, "text": ANSWER, "chunk_delay": 0.3}])
    async with async_playwright() as playwright:
        # The browser is up before the session starts: on a loaded machine its launch alone
        # can take seconds of the thinking's 10.
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1200, "height": 900})
            async with api.client("alice") as http:
                started = await http.post(
                    "/v1/sessions",
                    json={"goal": "Say it well.", "session_id": session_id, "thinking_budget": 2048},
                )
                assert started.status_code == 201, started.text
            await page.goto(f"{api.url}/?token={TOKENS['alice']}#/s/{session_id}")
            # Partly there while the model thinks, in its own dimmed block, not in the text.
            await page.wait_for_function(THINKING_PARTLY, arg=len(THOUGHT), timeout=20_000)
            assert await page.locator("#turn-1 .text").text_content() == ""
            style = await page.locator("#turn-1 .thinking").evaluate("e => getComputedStyle(e).fontStyle")
            assert style == "italic"
            await page.screenshot(path=OUTPUT / "api-page-thinking.png")
            await page.wait_for_selector("#final-status", timeout=30_000)
            assert await page.locator("#turn-1 .text").text_content() == ANSWER
            assert await page.locator("#turn-1 .thinking").text_content() == THOUGHT
        finally:
            await browser.close()


WORDS = " ".join(f"word{i}" for i in range(600))  # 30 s, a word every 50 ms


def _requests(model: FakeModelServer, session_id: str) -> list[dict]:
    return [r for r in model.script.requests if r["session"] == session_id]


async def _start(api: ApiProcess, **body: object) -> None:
    async with api.client("alice") as http:
        started = await http.post("/v1/sessions", json=body)
        assert started.status_code == 201, started.text


async def _until(check, what: str, timeout: float = 30):
    deadline = asyncio.get_running_loop().time() + timeout
    while not (found := check()):
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)
    return found


async def test_the_message_box_steers_and_interrupts_in_chromium(
    api: ApiProcess, page_model: FakeModelServer
):
    from playwright.async_api import async_playwright

    working, chat = f"session-steer-{uuid.uuid4().hex[:8]}", f"session-cut-{uuid.uuid4().hex[:8]}"
    page_model.script.set(
        working, [tool_use("slow_upsert", {"key": "k", "seconds": 3}, id="s1"), answer("fini")]
    )
    page_model.script.set(chat, [answer(WORDS, pace=0.05), answer("short")])
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1200, "height": 900})
            await _start(api, goal="Write the record.", session_id=working)
            await page.goto(f"{api.url}/?token={TOKENS['alice']}#/s/{working}")
            await page.wait_for_selector("#message-form:not([hidden])", timeout=20_000)
            await page.wait_for_selector("#call-s1", timeout=20_000)  # the tool runs
            assert await page.locator("#message-mode").input_value() == "steer"  # not a chat: steer
            assert await page.locator("#message-mode option[value=queue]").is_disabled()
            assert await page.locator("#close-chat").is_hidden()
            await page.fill("#message", "answer in French")
            await page.click("#send")
            sent = page.locator(".message.user.sent")
            await sent.wait_for(timeout=10_000)
            assert "answer in French" in (await sent.text_content() or "")
            await page.wait_for_selector(
                ".message.user.sent .who:has-text('the model got it at step 2')", timeout=30_000
            )
            second = (await _until(lambda: _requests(page_model, working)[1:], "the second call"))[0]
            assert second["body"]["messages"][-1]["content"][-1]["text"] == "answer in French"
            await page.wait_for_selector("#final-status", timeout=30_000)
            await page.screenshot(path=OUTPUT / "api-page-steer.png", full_page=True)
            assert await page.locator("#message-form").is_hidden()  # ended: nothing more to send

            await _start(api, goal="Write a lot.", session_id=chat, chat=True)
            await page.goto(f"{api.url}/#/s/{chat}")
            await page.wait_for_function(PARTLY_THERE, arg=len(WORDS), timeout=20_000)
            assert await page.locator("#message-mode").input_value() == "queue"  # a chat: queue
            await page.select_option("#message-mode", "interrupt")
            await page.fill("#message", "one word")
            await page.click("#send")
            [request] = _requests(page_model, chat)[:1]
            await _until(lambda: request.get("closed"), "the model's connection closed", 15)
            await page.wait_for_selector("#session-status:text-is('waiting_input')", timeout=30_000)
            await page.wait_for_function(
                "() => document.querySelector('#turn-1 .text').textContent === 'short'", timeout=20_000
            )
            who = await page.locator(".message.user.sent .who").text_content() or ""
            assert who.endswith("interrupt · the model got it at step 1"), who
            # The message comes before the step it cut short and that answered it, shown once.
            order = await page.eval_on_selector_all(
                "#conversation > *", "nodes => nodes.map(n => n.id || n.className)"
            )
            assert order.index("turn-1") == order.index("message-2") + 1, order
            assert await page.locator("#conversation .wait").count() == 0, order
            assert (
                await page.locator("#message-mode").input_value() == "interrupt"
            )  # the person's choice stays
            await page.screenshot(path=OUTPUT / "api-page-interrupt.png", full_page=True)
        finally:
            await browser.close()


async def test_a_limit_is_raised_or_declined_in_chromium(api: ApiProcess, page_model: FakeModelServer):
    from playwright.async_api import async_playwright

    raised, declined = (f"session-limit-{uuid.uuid4().hex[:8]}" for _ in range(2))
    for session_id in (raised, declined):
        page_model.script.set(session_id, [tool_use("get_time", id="t1"), answer("It is noon.")])
        await _start(api, goal="What time is it?", session_id=session_id, max_steps=1, on_limit="ask")
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1200, "height": 900})
            await page.goto(f"{api.url}/?token={TOKENS['alice']}#/s/{raised}")
            banner = page.locator(".approval.limit[data-limit='max_steps']")
            await banner.wait_for(timeout=30_000)
            assert await banner.locator(".used").text_content() == "1 used of 1"
            assert await page.locator("#session-status").text_content() == "waiting_budget"
            await page.wait_for_selector(".wait:has-text('max_steps reached: 1 used of 1')", timeout=10_000)
            await page.screenshot(path=OUTPUT / "api-page-limit.png", full_page=True)
            await banner.locator("input.value").fill("1")
            await banner.locator("button.raise").click()
            await banner.locator(".error:has-text('above what is used')").wait_for(timeout=10_000)
            await banner.locator("input.value").fill("3")
            await banner.locator("button.raise").click()
            final = page.locator("#final-status")
            await final.wait_for(timeout=30_000)
            assert "completed" in (await final.text_content() or "")
            assert "It is noon." in (await final.text_content() or "")
            await page.wait_for_selector(".wait:has-text('max_steps raised to 3 by alice')", timeout=10_000)
            assert await page.locator(".approval.limit").count() == 0

            await page.goto(f"{api.url}/#/s/{declined}")
            banner = page.locator(".approval.limit[data-limit='max_steps']")
            await banner.wait_for(timeout=30_000)
            await banner.locator("input.reason").fill("enough for today")
            await banner.locator("button.decline").click()
            await page.wait_for_selector("#final-status:has-text('stopped (max_steps)')", timeout=30_000)
        finally:
            await browser.close()


async def test_memories_are_seen_and_forgotten_in_chromium(api: ApiProcess, client: Client):
    from datetime import UTC, datetime

    from playwright.async_api import async_playwright
    from temporalio.common import WorkflowIDConflictPolicy

    from activities.memory import Memory, MemoryInput, scope_id
    from workflows.memory import MemoryWorkflow

    at = datetime.now(UTC)
    handle = await client.start_workflow(
        MemoryWorkflow.run,
        MemoryInput(memories=[Memory(key="drink", text="green tea", at=at), Memory(key="color", text="<b>teal</b>", at=at)]),
        id=scope_id("alice", None), task_queue=api.env["TEMPORAL_TASK_QUEUE"],
        id_conflict_policy=WorkflowIDConflictPolicy.TERMINATE_EXISTING,
    )  # fmt: skip
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1200, "height": 900})
            await page.goto(f"{api.url}/?token={TOKENS['alice']}")
            await page.click("#memory-link")
            await page.wait_for_selector(".memory[data-key='drink']", timeout=20_000)
            assert await page.locator(".memory").count() == 2
            # A memory's text is text: no markup from it reaches the page.
            assert await page.locator(".memory[data-key='color'] .text").text_content() == "<b>teal</b>"
            assert await page.locator(".memory b").count() == 0
            await page.screenshot(path=OUTPUT / "api-page-memories.png", full_page=True)
            await page.locator(".memory[data-key='drink'] button.forget").click()
            await page.wait_for_selector(".memory[data-key='drink']", state="detached", timeout=10_000)
            assert await page.locator(".memory").count() == 1
            await page.fill("#memory-agent", "../x")
            await page.click("#memory-show")
            await page.wait_for_selector("#memory-error:not(:empty)", timeout=10_000)

            other = await browser.new_page()
            await other.goto(f"{api.url}/?token={TOKENS['bob']}#/memory")
            await other.wait_for_selector("#memory-empty:not([hidden])", timeout=20_000)
            assert await other.locator(".memory").count() == 0
        finally:
            await browser.close()
            await handle.terminate()
