"""`python -m bench.fakeserver PORT`: the project's fake Messages API, tuned for load.

The same server as `devservers.fakemodel` (it answers at once, in JSON or, when the request
streams, in server-sent events), with three changes for benchmarks: a listen backlog that
takes 200 sessions connecting at once; a request log that keeps only the session, step,
arrival time and whether the request streamed (not every request body, which grows with
the transcript), so that `GET /_requests?session=ID` gives the model calls; and a streamed answer sent as the
real API sends it, in chunks on a connection kept alive for the next request (the test
server closes the connection after each stream), so that a client that streams pays no new
connection a call.
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import sys
import threading
import time
from typing import Any

from devservers.fakemodel import server as fake


class LightScript(fake.Script):
    def log(self, session: str, step: str | None, body: dict[str, Any]) -> dict[str, Any]:
        entry = {
            "session": session,
            "step": step,
            "at": time.time(),
            "done": None,
            "stream": bool(body.get("stream")),
        }
        with self.lock:
            self.requests.append(entry)
        return entry


class BenchHandler(fake.Handler):
    def setup(self) -> None:
        super().setup()
        # Headers and body are separate writes: without this, Nagle's algorithm and the
        # client's delayed ACK hold the body back ~40 ms on a kept-alive connection.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.chunked = False

    def _stream(self, message: dict[str, Any], turn: dict[str, Any]) -> None:
        """The test server's stream, each event a chunk (`transfer-encoding: chunked`), the
        connection kept alive. A turn that cuts or breaks its stream keeps the test server's."""
        if any(turn.get(fault) for fault in ("malformed", "cut_stream", "drop_mid")):
            super()._stream(message, turn)
            return
        self.chunked = True
        try:
            super()._stream(message, turn)
            self.wfile.write(b"0\r\n\r\n")
        finally:
            self.chunked = False
        self.close_connection = False

    def send_header(self, keyword: str, value: str) -> None:
        if self.chunked and keyword.lower() == "connection":
            keyword, value = "transfer-encoding", "chunked"
        super().send_header(keyword, value)

    def _event(self, name: str, payload: dict[str, Any]) -> None:
        if not self.chunked:
            super()._event(name, payload)
            return
        data = f"event: {name}\ndata: {json.dumps(payload)}\n\n".encode()
        self.wfile.write(b"%x\r\n%b\r\n" % (len(data), data))


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
