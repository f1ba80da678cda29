"""Built-in plugins that are not probes (alert sinks, rules, collectors). Installed as ``auditor.plugins``."""
