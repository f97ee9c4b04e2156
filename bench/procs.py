"""Child processes of the harness: started, read (peak memory, CPU time) and stopped by their PID."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from devservers import processes

ROOT = Path(__file__).absolute().parent.parent
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int | None) -> float | None:
    """User plus system CPU time of a process (all its threads), from /proc."""
    if pid is None:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


class Child:
    def __init__(
        self,
        name: str,
        args: list[str],
        env: dict[str, str],
        log: Path,
        stdin: bool = False,
        ready_line: bool = True,
    ):
        """`ready_line`: the child prints its readiness on stdout (`wait_line`); without it,
        stdout goes to the log too (nothing reads a pipe that a chatty child would fill)."""
        self.name = name
        self.log = open(log, "ab")
        self.process = subprocess.Popen(
            [sys.executable, *args],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE if ready_line else self.log,
            stderr=self.log,
            start_new_session=True,
            text=True,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_line(self, timeout: float = 120) -> str:
        """The first line the child prints (its readiness), or an error with its log."""
        deadline = time.monotonic() + timeout
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line or time.monotonic() > deadline:
            self.stop()
            raise RuntimeError(f"{self.name} did not start; see {self.log.name}")
        return line.strip()

    def _status(self, key: str) -> int | None:
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith(key + ":"):
                    return int(line.split()[1])
        except OSError:
            return None
        return None

    def peak_rss_mb(self) -> float | None:
        kb = self._status("VmHWM")
        return None if kb is None else kb / 1024

    def rss_mb(self) -> float | None:
        kb = self._status("VmRSS")
        return None if kb is None else kb / 1024

    def reset_peak(self) -> bool:
        """Reset the peak resident set size (Linux: write 5 to clear_refs)."""
        try:
            Path(f"/proc/{self.pid}/clear_refs").write_text("5")
            return True
        except OSError:
            return False

    def stop(self) -> None:
        processes.stop(self.process, grace=15)
        self.log.close()
