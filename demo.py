"""`python demo.py`: one example agent session end to end, with what it needs.

Uses the Temporal server at TEMPORAL_ADDRESS when one answers; otherwise starts the
bundled dev server (Web UI on :8233, state in a SQLite file under the data directory).
Uses Anthropic's API when ANTHROPIC_API_KEY is set; otherwise the local fake model,
whose every answer says so. Starts a worker process, starts a session, and follows it
live until it ends. Everything it started, it stops, by PID.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from devservers import processes, temporal_server
from infra.arguments import OneLineParser, port_number
from infra.datadir import data_dir

GOAL = "Find out what time it is, note it down, and email the team a one-line summary."


def main() -> int:
    parser = OneLineParser(prog="python demo.py", description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("goal", nargs="?", default=GOAL)
    parser.add_argument("--keep", action="store_true", help="keep the dev server running at the end")
    parser.add_argument(
        "--ui-port", type=port_number, default=8233, help="Web UI port of a dev server it starts"
    )
    args = parser.parse_args()
    from infra.connection import address  # Temporal's SDK: after the arguments, so --help answers at once

    here = Path(__file__).resolve().parent
    data = data_dir()
    env = dict(os.environ, AGENT_DATA_DIR=str(data))
    started: list[tuple[str, subprocess.Popen]] = []
    server = None
    try:
        host, _, port = address().rpartition(":")
        if not temporal_server.port_open(host or "localhost", int(port)):
            print(
                f"No Temporal server at {address()}: starting the bundled dev server (state in {data / 'temporal.db'})."
            )
            server = temporal_server.start(
                port=int(port),
                ui_port=args.ui_port,
                db_file=data / "temporal.db",
                log_file=data / "temporal.log",
            )
            env["TEMPORAL_ADDRESS"] = server.address
            env["TEMPORAL_UI_URL"] = f"http://localhost:{args.ui_port}"
        if not env.get("ANTHROPIC_API_KEY"):
            print("ANTHROPIC_API_KEY is not set: using the local fake model (its answers say [fake model]).")
            fake = subprocess.Popen(
                [sys.executable, "-m", "devservers.fakemodel"],
                cwd=here,
                env=env,
                stdout=subprocess.PIPE,
                text=True,
            )
            started.append(("fake model", fake))
            assert fake.stdout is not None  # stdout=PIPE
            env["ANTHROPIC_BASE_URL"] = fake.stdout.readline().strip()
            env["ANTHROPIC_API_KEY"] = "fake-key-for-the-local-fake-model"
        worker = subprocess.Popen(
            [sys.executable, "worker.py"], cwd=here, env=env,
            stdout=open(data / "worker.log", "ab"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        started.append(("worker", worker))
        print(f"Worker started (pid {worker.pid}, log {data / 'worker.log'}).\n")
        session = f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
        command = [sys.executable, "client.py", "start", args.goal, "--session", session, "--watch"]
        if not sys.stdin.isatty():
            # No one to ask: approve the demo's email from a second process as it appears.
            started.append(("auto-approver", auto_approver(here, env, session)))
        code = subprocess.call(command, cwd=here, env=env)
        if server is not None and args.keep:
            print(f"\nThe dev server keeps running (pid {server.pid}); stop it with: kill {server.pid}")
            server = None
        return code
    finally:
        for _, process in reversed(started):
            processes.stop(process, grace=10)
        if server is not None:
            server.stop()


def auto_approver(here: Path, env: dict[str, str], session: str) -> subprocess.Popen:
    code = f"""
import json, subprocess, sys, time
seen = set()
for _ in range(600):
    out = subprocess.run([sys.executable, "client.py", "status", {session!r}, "--json"], capture_output=True, text=True)
    if out.returncode == 0:
        status = json.loads(out.stdout)
        for pending in status["pending_approvals"]:
            if pending["tool_use_id"] not in seen:
                seen.add(pending["tool_use_id"])
                print("   (no terminal to ask: the demo approves", pending["name"], "itself)", flush=True)
                subprocess.run([sys.executable, "client.py", "approve", {session!r}, pending["tool_use_id"]], capture_output=True)
        if status["status"] in ("completed", "stopped", "failed", "cancelled"):
            break
    time.sleep(0.5)
"""
    return subprocess.Popen([sys.executable, "-c", code], cwd=here, env=env)


if __name__ == "__main__":
    sys.exit(main())
