"""Built-in fingerprint collectors: one module per section of the fingerprint document.

They run inside every stack's worker (Python 3.7, standard library only) and import
nothing from the auditor but ``auditor.plugins.collectors._files``. The worker registers
this package without running this file, so keep it empty.
"""
