"""The auditor's own memory: how many malloc arenas glibc keeps.

glibc gives each thread that allocates while another holds an arena an arena of its own, up to
eight per core, and keeps what was freed in each for reuse. A cycle drives stacks from thread
pools (a thread per stack in flight), so a fleet's cycle ends up with a dozen arenas each
holding freed buffers (fingerprints, outputs, reports) that never go back to the system:
measured with ``bench/fleet.py --all-variants`` at 16 hosts, peak RSS 179 MB by default and
154 MB with two arenas, at the same CPU. The auditor's threads mostly wait on workers, so two
arenas cost no contention that shows. ``MALLOC_ARENA_MAX`` set in the environment is left to
glibc (it read it at start); elsewhere than glibc this does nothing.
"""

from __future__ import annotations

import ctypes
import os

M_ARENA_MAX = -8
"""mallopt's parameter number (malloc.h)."""
ARENAS = 2


def limit_arenas(arenas: int = ARENAS) -> bool:
    """Cap glibc's malloc arenas for this process (before its threads start); whether it did."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's own symbols: its C library's
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to tune
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, arenas))
