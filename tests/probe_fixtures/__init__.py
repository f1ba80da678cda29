"""Probes used only by the tests: they misbehave on purpose inside a real stack worker."""
