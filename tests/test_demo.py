"""The README's first command runs the example session end to end (here without the venv set-up)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from devservers.temporal_server import free_port
from infra.datadir import read_effects

ROOT = Path(__file__).resolve().parents[1]


def test_demo_runs_a_session_end_to_end(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "TEMPORAL_"))}
    env.update(AGENT_DATA_DIR=str(tmp_path), TEMPORAL_ADDRESS=f"127.0.0.1:{free_port()}")
    done = subprocess.run(
        [sys.executable, "demo.py", "--ui-port", str(free_port())],
        cwd=ROOT, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "starting the bundled dev server" in out and "using the local fake model" in out
    assert "waiting for approval: send_email" in out and "the demo approves send_email itself" in out
    assert "completed" in out and "[fake model] Done." in out
    assert "/namespaces/default/workflows/demo-" in out
    effects = read_effects(tmp_path / "effects.jsonl")
    assert [e["tool"] for e in effects] == ["save_note", "send_email"]
