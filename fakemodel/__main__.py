"""`python -m fakemodel [--port N]`: serve the fake Messages API on 127.0.0.1."""

import argparse
import signal
import sys
import threading

from fakemodel.server import FakeModelServer


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m fakemodel", description=__doc__)
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: any free port)")
    args = parser.parse_args()
    server = FakeModelServer(port=args.port).start()
    print(server.url, flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    server.stop()
    sys.exit(0)


if __name__ == "__main__":
    main()
