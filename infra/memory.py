"""A long-running worker's memory: allocations of 64 KB and more get pages of their own,
and what the process built to start is left out of the garbage collector's counts.

glibc's malloc serves a large allocation from its heap once a freed one has raised its
(by default moving) threshold for mapping pages of their own. A worker allocates and
frees large strings at every step (request bodies, tool outputs, serialised payloads),
and between them the heap fills with small long-lived objects that keep the freed space
from being returned: over a session of thousands of steps the process kept growing by
about 20 MB while the memory in use stayed the same. A fixed threshold sends those large
allocations to their own pages, given back as each is freed, so the heap stays the size
of what is in use. `MALLOC_MMAP_THRESHOLD_` in the environment (glibc's own setting) wins;
other C libraries are left as they are.

Python's collector runs a full collection only once the objects that survived the younger
collections since the last one reach a quarter of the long-lived objects, most of which
a worker builds to start (modules, the SDKs, pydantic's schemas): the garbage cycles that
each step leaves then pile up for a thousand
steps before they are collected. `gc.freeze()` once started leaves those objects out, so
the full collections come with the session's own objects.
"""

from __future__ import annotations

import ctypes
import gc
import os
import platform

MMAP_THRESHOLD = 64 * 1024
M_MMAP_THRESHOLD = -3  # glibc's malloc.h


def fix_mmap_threshold(size: int = MMAP_THRESHOLD) -> bool:
    """Whether the threshold was set (only on glibc, and not when the environment sets it)."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    if os.environ.get("MALLOC_MMAP_THRESHOLD_"):
        return False
    try:
        libc = ctypes.CDLL(None)
        return bool(libc.mallopt(M_MMAP_THRESHOLD, size))
    except (OSError, AttributeError):
        return False


def freeze_startup() -> None:
    """Leave the objects built so far out of the collector's counts (and its passes)."""
    gc.collect()
    gc.freeze()
