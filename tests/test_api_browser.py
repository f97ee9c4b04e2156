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
            await page.fill("#agent", "assistant")
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
