"""The API fuzzed from its own OpenAPI schema with Schemathesis, as alice: every operation
answers without a server error and with a response the schema documents. The short form
(the fuzzing and stateful phases, 5 examples an operation) runs with the suite; the long
form (every phase, the coverage phase's edge cases included, 50 examples an operation) is
a slow test. Each records its figures in docs/generated/reliability.md."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.api import TOKENS, ApiProcess, module_api
from tests.support.reliability import record

pytestmark = pytest.mark.xdist_group("security-fuzz")

# What the schema promises: no 5xx, and each answer's status, headers and body as documented.
AREA = "The HTTP API fuzzed from its OpenAPI schema (Schemathesis)"
CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"


api = module_api("fuzz")


async def fuzz(api: ApiProcess, examples: int, phases: str, tmp_path: Path) -> str:
    """Schemathesis's run; its summary when every check held."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "schemathesis.cli", "run", f"{api.url}/openapi.json",
        "-H", f"Authorization: Bearer {TOKENS['alice']}", "--checks", CHECKS, "--phases", phases,
        "--max-examples", str(examples), "--seed", "1", "--no-color",
        "--report-dir", str(tmp_path), cwd=tmp_path,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(process.communicate(), 900)
    text = out.decode()
    assert await process.wait() == 0, text[-6000:]
    return text


def figures(out: str) -> dict[str, object]:
    cases = re.search(r"(\d+) generated, (\d+) passed", out)
    assert cases is not None, out[-3000:]
    return {"cases": cases[1], "passed": cases[2], "server errors": 0, "undocumented answers": 0}


async def test_a_short_fuzz_finds_no_server_error_and_no_undocumented_answer(api: ApiProcess, tmp_path: Path):
    out = await fuzz(api, 5, "fuzzing,stateful", tmp_path)
    record(AREA, "short form: fuzzing and stateful phases, 5 examples an operation, as alice",
           "no server error, every answer as documented", figures(out))  # fmt: skip


@pytest.mark.slow
async def test_a_long_fuzz_finds_no_server_error_and_no_undocumented_answer(api: ApiProcess, tmp_path: Path):
    out = await fuzz(api, 50, "examples,coverage,fuzzing,stateful", tmp_path)
    record(AREA, "long form: every phase, 50 examples an operation, as alice",
           "no server error, every answer as documented", figures(out))  # fmt: skip
