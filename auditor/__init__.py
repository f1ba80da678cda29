"""auditor: training/inference consistency auditor for RL policies on the MindSpore stack.

This file is kept importable on Python 3.7 with nothing installed, because stack workers
load ``auditor.worker`` from the same tree; anything heavier is imported lazily.
"""

__version__ = "0.1.0"
