"""The code change that applies a precision plan, as a person pastes it after building the
network: MindSpore's ``Cell.to_float`` calls, parents before children (``to_float`` is
recursive, a later call overrides), only where a cell's setting differs from what its parent's
call gave it."""

from __future__ import annotations

from collections.abc import Sequence

IMPORT = "from mindspore import dtype as mstype"
NAMES = {"float16": "mstype.float16", "float32": "mstype.float32"}


def attribute(net: str, path: str) -> str:
    """``net.hidden[1].norm`` for the cell path ``hidden.1.norm`` ("" is the network)."""
    out = net
    for part in path.split(".") if path else ():
        out += f"[{part}]" if part.isdigit() else (f".{part}" if part.isidentifier() else f"[{part!r}]")
    return out


def _parent(path: str, units: Sequence[str]) -> str | None:
    """The nearest unit that contains ``path`` ("" contains every other), or None for ""."""
    if path == "":
        return None
    parts = path.split(".")
    for i in range(len(parts) - 1, 0, -1):
        if ".".join(parts[:i]) in units:
            return ".".join(parts[:i])
    return ""


def lines(units: Sequence[str], keep: Sequence[str], compute: str = "float16", net: str = "net") -> list[str]:
    """The calls that make ``net`` compute in ``compute`` with the ``keep`` cells in float32."""
    kept = set(keep)
    setting = {u: ("float32" if u in kept else compute) for u in units}
    top = setting.get("", compute)  # the network's own setting comes first, whole
    out = [f"{attribute(net, '')}.to_float({NAMES[top]})"]
    given: dict[str, str] = {"": top}
    order = {p: i for i, p in enumerate(units)}
    for path in sorted((u for u in units if u), key=lambda p: (p.count("."), order[p])):
        parent = _parent(path, units)
        inherited = compute if parent is None else given.get(parent, compute)
        given[path] = setting[path]
        if setting[path] != inherited:
            out.append(f"{attribute(net, path)}.to_float({NAMES[setting[path]]})")
    return out
