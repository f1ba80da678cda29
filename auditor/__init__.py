"""auditor: training/inference consistency auditor for RL policies on the MindSpore stack.

This file is kept importable on Python 3.7 with nothing installed, because stack workers
load ``auditor.worker`` from the same tree; anything heavier is imported lazily.
"""

__version__ = "0.1.0"


def __getattr__(name):
    # PEP 562 (Python 3.7+): ``from auditor import hookimpl`` imports pluggy only when asked.
    if name in ("hookimpl", "hookspec"):
        from auditor import hookspecs

        return getattr(hookspecs, name)
    raise AttributeError(f"module 'auditor' has no attribute {name!r}")
