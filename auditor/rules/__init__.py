"""Compatibility rules over fingerprints and exported artifacts (auditor.rules.engine), the
operator-support table, which CANN a stack uses, and the deployed-model watch.

This face is the plugin API for rules: ``from auditor.rules import Rule, RuleContext,
finding`` (docs/plugins.md)."""

from auditor.rules.engine import Rule, RuleContext, finding

__all__ = ["Rule", "RuleContext", "finding"]
