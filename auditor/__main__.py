"""``python -m auditor``: the same as the ``auditor`` command."""

from auditor.entry import main

main()
