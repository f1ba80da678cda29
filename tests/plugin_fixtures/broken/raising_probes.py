"""A plugin whose probes raise: one inside the training stack's worker (build_cell), one in
the auditor (make_inputs). Each must cost only its own results."""

from auditor.hookspecs import hookimpl


@hookimpl
def auditor_probes():
    return ["raising_pkg.build_raises", "raising_pkg.inputs_raise"]
