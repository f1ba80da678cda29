"""The auditor's own memory: how glibc's malloc keeps what the auditor freed.

Two of glibc's defaults keep a fleet's cycle far above what it holds at any moment:

- **Arenas.** glibc gives each thread that allocates while another holds an arena an arena of
  its own, up to eight per core, and keeps what was freed in each for reuse. A cycle drives
  stacks from thread pools (a thread per stack in flight), so a fleet's cycle ends up with a
  dozen arenas each holding freed buffers. ``bench/fleet.py --all-variants`` at 16 hosts: peak
  RSS 179 MB by default, 154 MB with two arenas, at the same CPU (the auditor's threads mostly
  wait on workers, so two arenas cost no contention that shows).
- **The mmap threshold.** Blocks above it are mapped on their own and go back to the system
  when freed; but glibc raises the threshold to the size of every mapped block freed (up to
  32 MB), so after the first chunk of hosts the outputs of the next (arrays of tens to hundreds
  of KB, held while a chunk is judged) come from the heap, where they fragment it and stay.
  Fixed at 64 KB (and the heap trimmed above 128 KB free), at 64 hosts with all variants:
  peak RSS 169 -> 147 MB; with the fp32 variants 131 -> 118 MB; CPU within the bench's noise.

What the environment sets (``MALLOC_ARENA_MAX``, ``MALLOC_MMAP_THRESHOLD_``,
``MALLOC_TRIM_THRESHOLD_``, ``GLIBC_TUNABLES``: glibc read them at start) is left to glibc;
elsewhere than glibc this does nothing.
"""

from __future__ import annotations

import ctypes
import os

# mallopt's parameter numbers (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
ARENAS = 2
MMAP_THRESHOLD = 64 * 1024
TRIM_THRESHOLD = 128 * 1024

_SET_BY = {
    M_ARENA_MAX: ("MALLOC_ARENA_MAX", "glibc.malloc.arena_max"),
    M_MMAP_THRESHOLD: ("MALLOC_MMAP_THRESHOLD_", "glibc.malloc.mmap_threshold"),
    M_TRIM_THRESHOLD: ("MALLOC_TRIM_THRESHOLD_", "glibc.malloc.trim_threshold"),
}


def tune_malloc() -> bool:
    """Set glibc's arenas and thresholds for this process (before its threads start), except
    those the environment sets; whether anything was set."""
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's own symbols: its C library's
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to tune
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    done = False
    for param, value in (
        (M_ARENA_MAX, ARENAS),
        (M_MMAP_THRESHOLD, MMAP_THRESHOLD),
        (M_TRIM_THRESHOLD, TRIM_THRESHOLD),
    ):
        variable, tunable = _SET_BY[param]
        if variable in os.environ or tunable in tunables:
            continue
        done = bool(mallopt(param, value)) or done
    return done
