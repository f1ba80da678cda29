"""The built-in runtimes, one package each (``<name>/spec.py``: what the auditor knows about
the runtime; ``<name>/worker.py``: the class a stack's worker drives), registered by
``auditor.plugins.default_runtimes``.

Imported inside stack workers as a regular package (its parent, ``auditor.plugins``, is
registered without running its ``__init__``): this file and each runtime's ``__init__.py``
stay empty, and a ``worker.py`` imports nothing of the auditor but ``auditor.worker``.
"""
