"""`python -m devservers.fakemodel [--port N] [--api openai]`: serve a fake model API on 127.0.0.1."""

import argparse
import contextlib
import signal
import sys
import threading

from devservers.fakemodel.openai_server import FakeChatServer
from devservers.fakemodel.server import FakeModelServer


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m devservers.fakemodel", description=__doc__)
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: any free port)")
    parser.add_argument(
        "--api", choices=["anthropic", "openai"], default="anthropic",
        help="the Messages API (default) or Chat Completions (for OPENAI_BASE_URL=<url>/v1)",
    )  # fmt: skip
    args = parser.parse_args()
    server = (FakeChatServer if args.api == "openai" else FakeModelServer)(port=args.port).start()
    print(server.url, flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with contextlib.suppress(KeyboardInterrupt):
        stop.wait()
    server.stop()
    sys.exit(0)


if __name__ == "__main__":
    main()
