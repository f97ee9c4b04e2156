"""The benchmark harness runs end to end in its quick mode and writes its page.

Only the contenders that need no optional package (the plain loop, the Temporal floor
and this project, both ways), the scale scenario at its quick size and the reference run
on a default server; no figure is asserted, only that each was measured.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.process
def test_quick_benchmark_writes_the_report(tmp_path: Path):
    out = tmp_path / "docs"
    run = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--out", str(out),
         "--only", "plain,floor,project,project-local", "--scenarios", "single,many,history,scale"],
        cwd=ROOT, capture_output=True, text=True, timeout=420,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    page = (out / "benchmarks.md").read_text()
    for heading in ("## One session", "sessions at once", "## History size", "## Machine and versions",
                    "## Scale:", "## The same work on a server with Temporal's default settings"):  # fmt: skip
        assert heading in page
    assert "CPU per step, milliseconds" in page
    assert "| 100 | 100 |" in page  # the scale scenario's sessions, all completed
    for key in ("plain", "floor", "project", "project-local"):
        assert f"| {key} |" in page
    assert "pydantic-ai |" not in page
    assert "failed" not in page.split("## History size")[0].split("## One session")[1]
    assert "## Failures seen in this run" not in page
