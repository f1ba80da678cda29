"""Mixed precision of a MindSpore network, per cell: what `auditor fix` searches and exports.

A plan computes the whole network in one float type (``compute``, MindSpore's
``Cell.to_float``: every input of a cell, its Parameters included, cast on entry) and keeps
some cells in float32 (``keep``, their paths as ``cells_and_names`` names them, "" for the
network's own operations). ``to_float`` is recursive and a later call overrides an earlier
one, so the plan is applied top-down: each unit gets its own setting after its parent's, and a
kept cell that has children keeps only its own operations (its children keep theirs).

Runs inside a MindSpore train stack (Python 3.7 + numpy 1.21, or 3.11): the mindspore module
is the runtime's, passed in.
"""

# Cells that only hold others: they compute nothing of their own, so they are not units.
CONTAINERS = ("CellList", "CellDict", "SequentialCell")


def _is_unit(cell):
    return type(cell).__name__ not in CONTAINERS


def apply(ms, cell, plan):
    """Set ``cell``'s per-cell precision from ``plan`` ({"compute": "float16", "keep": [path,
    ...]}); returns the cell. A kept path the network does not have is an error (a plan from
    another network)."""
    compute = plan.get("compute") or "float16"
    keep = set(plan.get("keep") or ())
    types = {"float16": ms.float16, "float32": ms.float32}
    if compute not in types:
        raise ValueError("a precision plan computes in float16 or float32, not %r" % (compute,))
    named = list(cell.cells_and_names())
    unknown = sorted(keep - set(name for name, _ in named))
    if unknown:
        raise ValueError(
            "the network has no cell %s (its cells: %s)"
            % (", ".join(repr(u) for u in unknown), ", ".join(repr(n) for n, _ in named[:20]))
        )
    # cells_and_names is pre-order: a parent before its children, so each child's setting
    # overrides what its parent's recursive to_float gave it.
    for name, sub in named:
        sub.to_float(ms.float32 if name in keep else types[compute])
    return cell


def units(cell, run):
    """The network's units in the order they finish on one forward pass (``run()``): each
    cell that computes (containers excluded) as {"path", "type", "parameters", "children"};
    a parent after its last child, the network itself ("") last. Cells the pass never
    reached are left out: they compute nothing of the policy's outputs. PyNative forward
    hooks, removed after the run."""
    order = []
    handles = []

    def hook_for(path):
        def hook(*args):
            if path not in order:
                order.append(path)

        return hook

    named = [(name, sub) for name, sub in cell.cells_and_names() if _is_unit(sub)]
    for name, sub in named:
        handles.append(sub.register_forward_hook(hook_for(name)))
    try:
        run()
    finally:
        for handle in handles:
            handle.remove()
    if "" not in order and any(n == "" for n, _ in named):
        order.append("")  # MindSpore 2.0 does not call the top cell's own forward hook
    by_name = dict(named)
    out = []
    for path in order:
        sub = by_name[path]
        children = [n for n, c in sub.cells_and_names() if n and _is_unit(c)]
        out.append(
            {
                "path": path,
                "type": type(sub).__name__,
                "parameters": int(sum(int(p.size) for p in sub.get_parameters(expand=False))),
                "children": len(children),
            }
        )
    return out
