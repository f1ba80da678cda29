"""Kept for one release: ``from auditor.runtime import RuntimeSpec`` still works for runtime
plugins written before the layered layout; the class lives in auditor.extend.runtime_spec."""

from auditor.extend.runtime_spec import RuntimeSpec

__all__ = ["RuntimeSpec"]
