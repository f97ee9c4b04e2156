"""Stopping a child process: the one way the dev servers, the demo, the benchmarks and the
tests end what they started.

`stop(process)` sends SIGTERM by PID, gives the process `grace` seconds to exit, then
sends SIGKILL, and always reaps it. With `group=True` the signals go to its process group
instead (a child started with `start_new_session=True` leads one), so whatever it started
in turn ends with it. Nothing here looks a process up by name.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess

# After SIGKILL the kernel ends a process at once; this only bounds the wait to reap it.
REAP_SECONDS = 10.0


def stop(
    process: subprocess.Popen, *, grace: float = 10.0, group: bool = False, signum: int = signal.SIGTERM
) -> int | None:
    """End `process`: `signum` (SIGTERM), up to `grace` seconds to exit, then SIGKILL.

    Returns its exit code. A process that has already exited is only reaped. `group`
    signals its whole process group, when it leads one.
    """
    if process.poll() is not None:
        return process.returncode
    _send(process, signum, group)
    try:
        return process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        return kill(process, group=group)


def kill(process: subprocess.Popen, *, group: bool = False) -> int | None:
    """kill -9 by PID (or its process group) and reap it; returns its exit code."""
    _send(process, signal.SIGKILL, group)
    return process.wait(timeout=REAP_SECONDS)


def _send(process: subprocess.Popen, signum: int, group: bool) -> None:
    if group and process.poll() is None and _leads_group(process.pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signum)
        return
    process.send_signal(signum)  # by PID; does nothing once the process has been reaped


def _leads_group(pid: int) -> bool:
    try:
        return os.getpgid(pid) == pid
    except ProcessLookupError:
        return False
