"""The operator sweep's cases (scripts/operator_sweep.py): ``catalog`` (names, inputs; numpy
only, read by the driver) and ``cells`` (one minimal MindSpore cell per case, built inside a
training stack's worker). Registered in workers without running this file."""
