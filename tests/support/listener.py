"""A loopback HTTP listener that records every request it is sent, whatever its method or
path: the proof that a worker or the service did not reach out (or reached only where it
was allowed). It answers each request with `answer` (JSON, 200), so a client that would
follow a reference gets something it can use and goes on."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Listener:
    url: str = ""
    answer: Any = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def seen(self) -> list[Request]:
        with self.lock:
            return list(self.requests)

    def paths(self) -> list[str]:
        return [r.path for r in self.seen()]


@contextmanager
def listening(answer: Any = None) -> Iterator[Listener]:
    """A listener on 127.0.0.1 and a free port, shut down on exit."""
    found = Listener(answer={} if answer is None else answer)

    class Handler(BaseHTTPRequestHandler):
        def _record(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with found.lock:
                found.requests.append(Request(self.command, self.path, dict(self.headers.items()), body))
            raw = json.dumps(found.answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _record

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    found.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield found
    finally:
        server.shutdown()
        server.server_close()
