"""``auditor fingerprint``: collect the stacks' fingerprints now and show them."""

from __future__ import annotations

import json
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import click

from auditor.cli.context import Context
from auditor.cli.exits import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE
from auditor.cli.selection import narrowed, selection_of, selector_options
from auditor.config.tables import StackConfig
from auditor.fingerprint import collect as fp
from auditor.report import fleet_view
from auditor.rules import cann_choice
from auditor.stacks.worker import WorkerError

EXIT_INCOMPLETE = EXIT_FINDINGS
VALUE_WIDTH = 70


@click.command("fingerprint")
@click.argument("named", nargs=-1, metavar="[STACK]...")
@click.option("--json", "as_json", is_flag=True, help="Print the full fingerprint documents as JSON.")
@click.option(
    "--members",
    is_flag=True,
    help="Show every member of a host group on its own (default: members alike, host names aside, "
    "are one block naming their hosts).",
)
@selector_options()
@click.pass_obj
def fingerprint_command(
    obj: Context, named: tuple[str, ...], as_json: bool, members: bool, **kw: Any
) -> None:
    """Fingerprint stacks now (default: every configured stack, or those the selectors
    --stack, --pair, --probe, --model, --host reach) and show what was found.

    For each stack: host and Python, MindSpore / MindSpore Lite builds and the CANN
    versions MindSpore supports, CANN, driver, firmware, npu-smi, and the environment
    variables that change numerics; every value that could not be determined is listed
    with the reason. Nothing is stored.

    \b
    Exit status:
      0  every stack was fingerprinted
      1  some stack could not be started, or a collector failed (shown)
      2  usage or config error
    """
    config = obj.config()
    selection = selection_of(kw)
    stacks = named + (tuple(narrowed(config, selection).config.stacks) if not selection.empty else ())
    unknown = [name for name in stacks if name not in config.stacks]
    if unknown:
        click.echo(
            f"auditor: no stack named {', '.join(map(repr, unknown))} in {config.source} "
            f"(configured: {', '.join(config.stacks)})",
            err=True,
        )
        sys.exit(EXIT_USAGE)
    names = list(dict.fromkeys(stacks)) or list(config.stacks)
    plugins = obj.plugins()
    collectors = plugins.fingerprint_collectors()
    reach = plugins.reach(config)

    def one(name: str) -> dict[str, Any] | str:
        try:
            return fp.fingerprint_stack(reach, name, collectors)
        except WorkerError as exc:
            return exc.describe()
        except Exception as exc:  # a bad plugin module name, say: report it with the stack
            return f"stack {name}: fingerprint failed: {type(exc).__name__}: {exc}"

    size, tasks = reach.parallel({n: (lambda n=n: one(n)) for n in names}, release=True)
    with reach, ThreadPoolExecutor(max_workers=size) as pool:
        futures = {n: pool.submit(task) for n, task in tasks.items()}
        results = {n: futures[n].result() for n in names}

    complete = all(isinstance(r, dict) and not fp.errors(r) for r in results.values())
    if as_json:
        out = {name: r if isinstance(r, dict) else {"error": r} for name, r in results.items()}
        click.echo(json.dumps(out, indent=2, sort_keys=False))
    else:
        blocks = {name: render(config.stacks[name], result) for name, result in results.items()}
        said = blocks.values() if members else fleet_view.blocks_folded(blocks, _without_machine)
        click.echo("\n".join(said), nl=False)
    sys.exit(EXIT_OK if complete else EXIT_INCOMPLETE)


def _without_machine(text: str, host: str) -> str:
    """A member's block without the machine's own name and id (they differ on every machine)."""
    return re.sub(r"^(  host {9})\S+  (.*?)(?:  machine-id \S+)?$", r"\1\2", text, flags=re.M)


def render(stack: StackConfig, result: dict[str, Any] | str) -> str:
    """The readable summary of one stack's fingerprint (or why there is none)."""
    where = "" if stack.host == "local" else f", on host {stack.host}"
    lines = [f"{stack.name}  ({stack.role}, {stack.runtime}, {stack.python}{where})"]
    if isinstance(result, str):
        lines += [
            "  NOT COLLECTED: " + line if i == 0 else "  " + line
            for i, line in enumerate(result.splitlines())
        ]
        return "\n".join(lines) + "\n"
    doc = result

    def row(label: str, text: str) -> None:
        lines.append(f"  {label:<12} {text}")

    host = _section(doc, "host")
    osr = host.get("os_release") or {}
    row(
        "host",
        _join(
            host.get("hostname"),
            osr.get("PRETTY_NAME"),
            host.get("kernel") and f"kernel {host['kernel']}",
            host.get("arch"),
            host.get("cpu_model"),
            host.get("machine_id") and f"machine-id {host['machine_id'][:12]}",
        ),
    )
    conn = _section(doc, "connection")
    if conn:
        how = conn.get("destination") or " ".join(conn.get("command") or [])
        row("connection", _join(conn.get("host"), conn.get("transport"), how, conn.get("address")))
    py = host.get("python") or {}
    runtime = _section(doc, "runtime")
    row("python", _join(_v(py.get("version")), py.get("implementation"), py.get("executable")))
    if runtime:
        row(
            "runtime",
            _join(
                runtime.get("runtime"),
                f"({runtime.get('runtime_package')} {_v(runtime.get('runtime_version'))})",
                f"numpy {_v(runtime.get('numpy'))}",
            ),
        )
    framework = _section(doc, "framework")
    packages = (_section(doc, "packages").get("framework")) or {}
    ms = framework.get("mindspore")
    if ms:
        supported = ms.get("supported_cann")
        row(
            "MindSpore",
            _join(
                _v(ms.get("version")),
                f"commit {_v(ms.get('commit_id'))}",
                f"supports CANN {', '.join(supported) if supported is not None else '?'}",
            ),
        )
    else:
        row("MindSpore", "not installed" if "mindspore" in framework.get("unknown", {}) else "?")
    lite = framework.get("mindspore_lite")
    row(
        "Lite",
        _join(_v(lite.get("version")), f"commit {_v(lite.get('commit_id'))}") if lite else "not installed",
    )
    others = [
        f"{n} {v}" for n, v in packages.items() if v is not None and n not in ("mindspore", "mindspore-lite")
    ]
    row("packages", ", ".join(others) or "-")
    cann = _section(doc, "cann")
    for label, text in cann_choice.summary(doc, runtime.get("runtime_package") or stack.runtime):
        row(label, text)
    nnae, nnrt = cann.get("nnae") or {}, cann.get("nnrt") or {}
    row("nnae / nnrt", f"{nnae.get('version') or '-'} / {nnrt.get('version') or '-'}")
    driver = _section(doc, "driver")
    row(
        "driver",
        _join(
            _v(driver.get("version")),
            driver.get("innerversion"),
            driver.get("compatible_version_fw") and "firmware " + _ranges(driver["compatible_version_fw"]),
        ),
    )
    firmware = _section(doc, "firmware")
    row(
        "firmware",
        _join(
            _v(firmware.get("version")),
            firmware.get("compatible_version_drv")
            and "driver " + _ranges(firmware["compatible_version_drv"]),
        ),
    )
    row("npu-smi", _npu_smi(_section(doc, "npu_smi")))
    watched = _section(doc, "models")
    for i, (path, entry) in enumerate(sorted((watched.get("files") or {}).items())):
        row("models" if i == 0 else "", watched_file(path, entry))
    env = doc.get("environment") if isinstance(doc.get("environment"), dict) else {}
    if "error" in env:
        env = {}
    row("environment", ", ".join(f"{k}={_short(str(v))}" for k, v in env.items()) or "(none set)")
    problems = fp.errors(doc)
    if problems:
        lines.append("  collector errors:")
        lines += [f"    {name}: {error}" for name, error in problems.items()]
    missing = fp.unknowns(doc)
    if missing:
        lines.append("  unknown:")
        for name, fields in missing.items():
            by_reason: dict[str, list[str]] = {}
            for field_name, reason in fields.items():
                by_reason.setdefault(str(reason), []).append(field_name)
            for reason, field_names in by_reason.items():
                lines.append(f"    {name}.{', '.join(field_names)}: {reason}")
    return "\n".join(lines) + "\n"


def watched_file(path: str, entry: dict[str, Any]) -> str:
    """A served model file in one line: its path, digest, size and MindIR identity (#54: only
    --json listed them)."""
    size = entry.get("size")
    what = [
        f"sha256 {str(entry.get('sha256'))[:12]}",
        f"{size / 1e6:.1f} MB" if isinstance(size, int) else None,
    ]
    if entry.get("readable"):
        producer = " ".join(str(x) for x in (entry.get("producer_name"), entry.get("producer_version")) if x)
        what += [f"MindIR {_v(entry.get('mind_ir_version'))}", f"by {producer}" if producer else None]
    else:
        what.append(f"not a readable MindIR ({entry.get('reason') or '?'})")
    return f"{path}  " + _join(*what)


def _section(doc: dict[str, Any], name: str) -> dict[str, Any]:
    section = doc.get(name)
    return section if isinstance(section, dict) and "error" not in section else {}


def _npu_smi(section: dict[str, Any]) -> str:
    if not section.get("available"):
        return "not available" if section else "?"
    chips = section.get("chips") or []
    listed = ", ".join(f"{c['npu']}/{_v(c.get('chip'))} {c.get('name')} {c.get('health')}" for c in chips)
    # Per NPU, grouped: "board firmware 7.3.0.1.231  compatibility OK (NPU 0, 1); no board view (NPU 2)"
    groups: dict[str, list[str]] = {}
    for key, npu in (section.get("npus") or {}).items():
        board = npu.get("board") if isinstance(npu, dict) else None
        said = "no board view"
        if isinstance(board, dict):
            said = f"board firmware {_v(board.get('firmware_version'))}"
            said += f"  compatibility {_v(board.get('compatibility'))}"
        groups.setdefault(said, []).append(str(key))
    boards = [f"{said} (NPU {', '.join(ids)})" if len(groups) > 1 else said for said, ids in groups.items()]
    return _join(
        f"{section.get('count')} NPU(s)",
        f"driver {_v(section.get('driver_version'))}",
        listed,
        "; ".join(boards),
    )


def _ranges(ranges: list[Any]) -> str:
    return ", ".join("..".join(r) if isinstance(r, list) else str(r) for r in ranges)


def _v(value: Any) -> str:
    return "?" if value is None else str(value)


def _join(*parts: Any) -> str:
    return "  ".join(str(p) for p in parts if p)


def _short(text: str) -> str:
    return text if len(text) <= VALUE_WIDTH else text[: VALUE_WIDTH - 3] + "..."
