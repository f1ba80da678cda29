"""The auditor's own BLAS: one thread.

numpy's OpenBLAS starts a thread per core and keeps them spinning between calls. The auditor's
matrix work is a policy's float64 reference and the layer sweeps' solver: matrices of a few
thousand rows by tens of columns, where a second thread saves nothing and its spinning costs a
core while the cycle waits on its workers (ppo_policy at a batch of 32,768: 4.5 CPU-s with two
threads, 3.4 with one, bench/policy_batch.py). threadpoolctl sets the loaded library's own
thread count in this process; the environment, and so every worker and zygote the auditor
starts, is left as it was (a stack's numerics are the stack's).
"""

from __future__ import annotations

from contextlib import AbstractContextManager

from threadpoolctl import threadpool_limits

THREADS = 1


def one_thread() -> AbstractContextManager[object]:
    """For a block that runs the auditor's numpy work (a cycle): BLAS on one thread, as it was
    after the block."""
    return threadpool_limits(limits=THREADS, user_api="blas")
