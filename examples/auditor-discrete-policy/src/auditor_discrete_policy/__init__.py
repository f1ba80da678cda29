"""Example auditor plugin: a discrete-action (categorical) policy probe.

The package has three parts, one per process it runs in:
- ``policy``: the probe module. Its ``build_cell`` runs inside the training stack's worker
  (Python 3.7, MindSpore imported inside the function); the rest runs in the auditor.
- ``comparators``: metrics for categorical outputs, run in the auditor.
- ``plugin``: the ``@hookimpl`` functions that register both (the entry point).

This ``__init__`` is not run inside the stacks (the worker registers the package without
it), but keep it free of imports anyway so it stays cheap.
"""

__version__ = "0.1.0"
