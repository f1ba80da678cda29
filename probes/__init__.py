"""Built-in probe models. Installed as ``auditor.probes``.

Every module here is imported both by the auditor (Python 3.11) and inside the stacks
(Python 3.7, numpy 1.21): framework imports stay inside the functions that run in a worker.
"""
