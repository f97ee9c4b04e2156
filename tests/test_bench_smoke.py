"""The benchmark harness runs end to end in its quick mode and writes its page.

Only the contenders that need no optional package (the plain loop, the Temporal floor
and this project, both ways); no figure is asserted, only that each was measured.
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
         "--only", "plain,floor,project,project-local", "--scenarios", "single,many,history"],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    page = (out / "benchmarks.md").read_text()
    for heading in ("## One session", "sessions at once", "## History size", "## Machine and versions"):
        assert heading in page
    for key in ("plain", "floor", "project", "project-local"):
        assert f"| {key} |" in page
    assert "pydantic-ai |" not in page
    assert "failed" not in page.split("## History size")[0].split("## One session")[1]
    assert "## Failures seen in this run" not in page
