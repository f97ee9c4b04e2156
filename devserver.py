"""`python devserver.py`: run the bundled Temporal dev server until Ctrl-C.

Its state is kept in `$AGENT_DATA_DIR/temporal.db`, so sessions survive a restart; the
Web UI is on http://localhost:8233. The server logic lives in `plumbing/devserver.py`.
It runs with the queue poll limits raised for agent latency; `--default-settings` runs
Temporal's defaults instead (a reference for measurements).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from plumbing import devserver


def main() -> None:
    parser = argparse.ArgumentParser(prog="python devserver.py", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=7233, help="gRPC port (default 7233)")
    parser.add_argument("--ui-port", type=int, default=8233, help="Web UI port (default 8233)")
    parser.add_argument("--default-settings", action="store_true",
                        help="Temporal's default server settings, not the tuned ones")  # fmt: skip
    parser.add_argument("--gomaxprocs", type=int, help="GOMAXPROCS for the server (default: the Go runtime's)")
    args = parser.parse_args()
    data = Path(os.environ.get("AGENT_DATA_DIR", ".agent-data")).resolve()
    server = devserver.start(
        port=args.port, ui_port=args.ui_port, db_file=data / "temporal.db", log_file=data / "temporal.log",
        tuned=not args.default_settings, gomaxprocs=args.gomaxprocs,
    )
    print(f"Temporal dev server on {server.address}, Web UI http://localhost:{args.ui_port} (pid {server.pid})")
    try:
        server.process.wait()
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
