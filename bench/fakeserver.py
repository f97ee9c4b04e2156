"""`python -m bench.fakeserver PORT`: the project's fake Messages API, tuned for load.

The same server as `devservers.fakemodel` (it answers at once), with two changes for benchmarks:
a listen backlog that takes 200 sessions connecting at once, and a request log that
keeps only the session, step and arrival time (not every request body, which grows
with the transcript). `GET /_requests?session=ID` then gives the model-call times.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import sys
import threading
import time
from typing import Any

from devservers.fakemodel import server as fake


class LightScript(fake.Script):
    def log(self, session: str, step: str | None, body: dict[str, Any]) -> dict[str, Any]:
        entry = {"session": session, "step": step, "at": time.time(), "done": None}
        with self.lock:
            self.requests.append(entry)
        return entry


class BenchHandler(fake.Handler):
    def setup(self) -> None:
        super().setup()
        # Headers and body are separate writes: without this, Nagle's algorithm and the
        # client's delayed ACK hold the body back ~40 ms on a kept-alive connection.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class BenchHTTPServer(fake.FakeModelHTTPServer):
    request_queue_size = 1024

    def __init__(self, address: tuple[str, int]):
        super().__init__(address)
        self.RequestHandlerClass = BenchHandler
        self.script = LightScript()


def main() -> None:
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    httpd = BenchHTTPServer(("127.0.0.1", port))
    # /_reset re-initialises the script object in place; keep it a LightScript.
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    print(f"http://127.0.0.1:{httpd.server_address[1]}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with contextlib.suppress(KeyboardInterrupt):
        stop.wait()
    httpd.shutdown()
    httpd.server_close()


if __name__ == "__main__":
    main()
