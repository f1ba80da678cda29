"""Comparing a reference's outputs with a runtime's: element-wise (auditor.compare.outputs),
the comparators' math (auditor.compare.metrics), the input classes that reach saturation and
fp16 edges, and golden files. numpy only.

This face is the plugin API for comparators: ``from auditor.compare import Comparator,
MetricCheck`` (docs/plugins.md)."""

from auditor.compare.verdicts import Comparator, MetricCheck

__all__ = ["Comparator", "MetricCheck"]
