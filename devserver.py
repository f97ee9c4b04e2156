"""`python devserver.py`: run the bundled Temporal dev server until Ctrl-C.

Its state is kept in `$AGENT_DATA_DIR/temporal.db`, so sessions survive a restart; the
Web UI is on http://localhost:8233. With `AGENT_PAYLOAD_KEYS` set, a codec endpoint
(infra/codec_server.py) runs beside it and the UI shows payloads decrypted.
`--with-s3` also runs a local S3 server (SeaweedFS) and prints the environment that
points workers and clients at it, to try several "hosts" on one machine. The server
logic lives in `devservers/temporal_server.py` and `devservers/seaweed.py`.
It runs with the queue poll limits raised for agent latency; `--default-settings` runs
Temporal's defaults instead (a reference for measurements).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from devservers import processes, seaweed, temporal_server
from infra import codec_server, extras
from infra.arguments import OneLineParser, port_number, positive_int
from infra.errors import AgentError


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def main() -> None:
    parser = OneLineParser(prog="python devserver.py", description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--port", type=port_number, default=7233, help="gRPC port (default 7233)")
    parser.add_argument("--ui-port", type=port_number, default=8233, help="Web UI port (default 8233)")
    parser.add_argument(
        "--codec-port",
        type=port_number,
        default=8234,
        help="codec endpoint port, with AGENT_PAYLOAD_KEYS (default 8234)",
    )
    parser.add_argument(
        "--with-s3", action="store_true", help="also run a local S3 server for AGENT_STORE_URL"
    )
    parser.add_argument(
        "--s3-port", type=port_number, default=8333, help="its S3 port, with --with-s3 (default 8333)"
    )
    parser.add_argument("--default-settings", action="store_true",
                        help="Temporal's default server settings, not the tuned ones")  # fmt: skip
    parser.add_argument(
        "--gomaxprocs", type=positive_int, help="GOMAXPROCS for the server (default: the Go runtime's)"
    )
    args = parser.parse_args()
    data = Path(os.environ.get("AGENT_DATA_DIR", ".agent-data")).resolve()
    data.mkdir(parents=True, exist_ok=True)
    from infra.keyring import keyring_from_env

    try:
        encrypted = keyring_from_env() is not None
        if encrypted:
            extras.require("codec", "the codec endpoint for AGENT_PAYLOAD_KEYS")
    except AgentError as err:
        sys.exit(f"error: {err}")
    # SIGTERM ends the helpers too, as Ctrl-C does.
    signal.signal(signal.SIGTERM, _interrupt)
    helpers: list[subprocess.Popen] = []
    if encrypted:
        helpers.append(codec_server.spawn(args.codec_port, data / "codec-server.log", ui_port=args.ui_port))
        print(
            f"Codec endpoint http://127.0.0.1:{args.codec_port} (pid {helpers[-1].pid}): the UI shows decrypted payloads"
        )
    s3 = seaweed.start(data / "seaweedfs", port=args.s3_port) if args.with_s3 else None
    if s3 is not None:
        print(f"S3 (SeaweedFS) on {s3.endpoint} (pid {s3.pid}); for every worker and client:")
        print("\n".join(f"  export {name}={value}" for name, value in s3.env().items()))
    server = temporal_server.start(
        port=args.port, ui_port=args.ui_port, db_file=data / "temporal.db", log_file=data / "temporal.log",
        codec_endpoint=f"http://127.0.0.1:{args.codec_port}" if encrypted else None,
        tuned=not args.default_settings, gomaxprocs=args.gomaxprocs,
    )  # fmt: skip
    print(
        f"Temporal dev server on {server.address}, Web UI http://localhost:{args.ui_port} (pid {server.pid})"
    )
    try:
        server.process.wait()
    except KeyboardInterrupt:
        server.stop()
    finally:
        for helper in helpers:
            processes.stop(helper, grace=10)
        if s3 is not None:
            s3.stop()


if __name__ == "__main__":
    main()
