"""The built-in compatibility rules (FACTS.md §3 "Compatibility rules").

- mindspore-cann: MindSpore's own list of supported CANN versions (read from its installed
  ``_check_version.py``) against major.minor of the compiler's ``Version=`` of the CANN the
  stack's MindSpore would load (``cann.choice``; "probably" where that is an inference);
- runtime-cann: a runtime that would find no CANN on any of its paths (the paths named), and a
  MindSpore whose version check reads one CANN while the loader gives it another's libraries;
- mindir-version: an exported artifact's format version (a MindIR's ``mind_ir_version``)
  against the highest version the inference runtime reads: learned from the runtime's own
  rejection message when it has refused a file before, else the runtime package's version
  facts (``RuntimeSpec.reads``: Lite 2.0.0 and 2.2.11 read 1; MindSpore reads what it
  writes: 1.7-2.2.x -> 1, 2.3-2.4.x -> 2, 2.5 and later -> 3);
- operator-support: an exported MindIR's operator types against those the inference runtime
  is known not to run in any graph (the runtime plugin's ``unsupported_operators`` table;
  an operator one load failed on may run in another graph: ``auditor.rules.operator_support``);
- driver-firmware: the firmware in one of the driver's ``compatible_version_fw`` ranges, or
  the driver in one of the firmware's ``compatible_version_drv`` ranges; firmware below 6.4
  never;
- npu-firmware: the firmware package on disk against the firmware each NPU reports;
- cann-driver (inferred, unverified): the innerversion code of the CANN the stacks load in the
  driver's ``compatible_version`` list, or the driver's code in that CANN's;
- train-infer-pairing: the two stacks of a pair on the same CANN major.minor, the same
  MindSpore / MindSpore Lite version, and the same numerics-changing environment.

Every rule stays silent when a fact it needs is unknown.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from auditor.config.tables import PairConfig
from auditor.fleet import peers
from auditor.hookspecs import hookimpl
from auditor.results import Finding
from auditor.rules import cann_choice
from auditor.rules.engine import Rule, RuleContext, major_minor, version_tuple
from auditor.rules.engine import finding as _finding
from auditor.runtime import readers_facts, writers_of

# -- MindSpore <-> CANN ------------------------------------------------------------------------

# The CANN release the MindSpore install guide names for each release (FACTS.md); for advice only.
RECOMMENDED_CANN = {
    (2, 0): "6.3.RC1",
    (2, 1): "6.3.RC2",
    (2, 2): "7.0.0",
    (2, 3): "8.0.RC2",
    (2, 4, 0): "8.0.RC3",
    (2, 4, 1): "8.0.RC3",
    (2, 4, 10): "8.0.0",
    (2, 5): "8.0.0",
    (2, 6): "8.1.RC1",
}


def recommended_cann(version: str | None) -> str | None:
    v = version_tuple(version)
    if v is None:
        return None
    return RECOMMENDED_CANN.get(v[:3]) or RECOMMENDED_CANN.get(v[:2])


def _on_npu(ctx: RuleContext, stack: str) -> bool:
    config = ctx.stacks.get(stack)
    return config is not None and config.device.startswith("ascend")


def mindspore_cann(ctx: RuleContext) -> Iterable[Finding]:
    for name in ctx.stacks:
        ms = ctx.section(name, "framework").get("mindspore")
        if not isinstance(ms, dict):
            continue  # no MindSpore in this stack (a Lite stack), or no fingerprint
        cann = ctx.section(name, "cann")
        choice = cann_choice.for_framework(cann, "mindspore")
        if choice is None:  # a fingerprint from before cann.choice: the toolkit's numbers
            compiler, chosen = cann.get("compiler_version"), None
            release, home = cann.get("version"), cann.get("root")
        elif choice.package is None:
            continue  # no CANN on MindSpore's paths: the runtime-cann rule says so, with the paths
        else:
            compiler, chosen = choice.compiler, choice.package
            release, home = choice.release, chosen.get("home")
        supported, version = ms.get("supported_cann"), ms.get("version")
        facts_choice = _choice_facts(choice)
        if chosen is not None and chosen.get("compiler_error"):
            yield _finding(
                "mindspore-cann",
                "critical" if _on_npu(ctx, name) else "warning",
                name,
                f"{name}/mindspore-cann",
                f"{name}: the CANN version file MindSpore {version} checks cannot be parsed: "
                f"{chosen['compiler_error']}",
                {"mindspore": version, "cann_package": chosen, **facts_choice},
                "repair or reinstall the CANN package; MindSpore reads Version= from this file",
                inferred=bool(choice and choice.probable),
            )
            continue
        if compiler is None or not supported:
            if _on_npu(ctx, name):
                if compiler is None:
                    why = f"{cann_choice.describe(chosen)} has no compiler/version.info" if chosen else None
                    why = why or (cann.get("unknown") or {}).get("compiler_version") or "not found"
                    missing = f"no CANN compiler version ({why})"
                else:
                    unknown = ctx.section(name, "framework").get("unknown") or {}
                    why = unknown.get("mindspore.supported_cann")
                    missing = f"MindSpore's supported CANN list could not be read ({why or 'empty'})"
                yield _finding(
                    "mindspore-cann",
                    "info",
                    name,
                    f"{name}/mindspore-cann",
                    f"{name} runs on {ctx.stacks[name].device} but MindSpore {version} cannot be "
                    f"checked against CANN: {missing}",
                    {
                        "mindspore": version,
                        "supported_cann": supported,
                        "cann_compiler_version": compiler,
                        **facts_choice,
                    },
                    "check the stack's ascend_root and that the CANN toolkit is installed there",
                )
            continue
        mm = major_minor(compiler)
        others = choice.others if choice is not None else []
        also = "; also installed: " + ", ".join(cann_choice.describe(p) for p in others) if others else ""
        uses = choice.uses if choice is not None else "uses"
        used = (
            f"{cann_choice.describe(chosen)} at {home} (by {choice.basis_words()})"
            if choice is not None and chosen is not None
            else (f"CANN {release} (compiler {compiler})" if release else f"CANN compiler {compiler}")
        )
        skipped = choice is not None and choice.checked is None
        reads = (
            f"which is {mm or compiler} by its compiler's Version= (MindSpore skips its own check here)"
            if skipped
            else f"which MindSpore's check reads as {mm or compiler}"
        )
        facts = {
            "mindspore": version,
            "supported_cann": list(supported),
            "cann_version": release,
            "cann_compiler_version": compiler,
            "cann_major_minor": mm,
            "cann_root": cann.get("root"),
            "cann_home": home,
            "cann_package": (chosen or {}).get("id") or (chosen or {}).get("name"),
            **facts_choice,
            "other_cann": [
                {k: p.get(k) for k in ("id", "name", "home", "version", "compiler_version")} for p in others
            ],
            "checker_file": ms.get("checker_file"),
        }
        inferred = bool(choice and choice.probable)
        if mm is not None and mm in {major_minor(s) or s for s in supported}:
            differing = [p for p in others if major_minor(p.get("compiler_version")) not in (None, mm)]
            if differing:
                yield _finding(
                    "mindspore-cann",
                    "info",
                    name,
                    f"{name}/mindspore-cann",
                    f"{name}: MindSpore {version} {uses} {used}, which it supports{also}",
                    facts,
                    "nothing to do while the stack keeps this environment; a changed ASCEND_HOME_PATH "
                    "or a removed package would switch MindSpore to another CANN",
                    inferred=inferred,
                )
            continue
        advice = recommended_cann(version)
        yield _finding(
            "mindspore-cann",
            "critical" if _on_npu(ctx, name) else "warning",
            name,
            f"{name}/mindspore-cann",
            f"{name}: MindSpore {version} supports CANN {', '.join(supported)}, but it {uses} {used}, "
            f"{reads}{also}",
            facts,
            f"install a CANN that MindSpore {version} supports ({', '.join(supported)}"
            + (f"; its install guide names {advice}" if advice else "")
            + f"), or a MindSpore release that supports CANN {mm or compiler}",
            inferred=inferred,
        )


def _choice_facts(choice: cann_choice.CannChoice | None) -> dict[str, Any]:
    """What a finding says about how the stack's CANN was chosen (nothing for old fingerprints)."""
    if choice is None:
        return {}
    return {
        "how": choice.how,
        "basis": choice.basis,
        "probable": choice.probable,
        "tried": list(choice.tried),
    }


# -- the CANN a runtime loads ------------------------------------------------------------------


def runtime_finds_cann(ctx: RuleContext) -> Iterable[Finding]:
    """No CANN on any of the runtime's paths (the paths named), and a MindSpore that checks one
    CANN while the dynamic loader gives it another's libraries."""
    for name in ctx.stacks:
        choice = cann_choice.for_runtime(ctx, name)
        if choice is None:
            continue
        installed = cann_choice.installed(ctx.section(name, "cann"))
        on_npu = _on_npu(ctx, name)
        facts = {
            "framework": choice.framework,
            "package": (choice.package or {}).get("id"),
            **_choice_facts(choice),
            "installed": [{k: p.get(k) for k in ("id", "name", "home", "version")} for p in installed],
        }
        if not choice.found:
            if not installed and not on_npu:
                continue  # a CPU stack on a host without CANN: nothing to say
            yield _finding(
                "runtime-cann",
                "critical" if on_npu else "info",
                name,
                f"{name}/runtime-cann",
                f"{name}: {choice.name} would find no CANN on any of its paths: {choice.how}",
                facts,
                "give the stack the environment its CANN's set_env.sh exports ([stacks.NAME] env: "
                "ASCEND_HOME_PATH, LD_LIBRARY_PATH), or install CANN where the runtime looks",
                inferred=choice.probable,
            )
            continue
        checked, libraries = choice.checked, choice.libraries
        if checked is None or libraries is None:
            continue
        key = ("version", "compiler_version")
        if all(checked.get(k) == libraries.get(k) for k in key):
            continue
        yield _finding(
            "runtime-cann",
            "error" if on_npu else "warning",
            name,
            f"{name}/runtime-cann-split",
            f"{name}: {choice.name} checks {cann_choice.describe(checked)} at {checked.get('home')} "
            f"(${choice.source}) while the dynamic loader gives it the libraries of "
            f"{cann_choice.describe(libraries)} at {libraries.get('home')} (LD_LIBRARY_PATH)",
            {**facts, "checked": checked.get("id"), "libraries": libraries.get("id")},
            "point ASCEND_HOME_PATH and LD_LIBRARY_PATH at the same CANN (source one set_env.sh)",
        )


# -- MindIR version <-> inference runtime ------------------------------------------------------
# (any artifact format with a version: the facts are the runtime packages', RuntimeSpec.reads
# and RuntimeSpec.writers; the learned maxima come from the runtimes' own rejection messages)


def _runtime(ctx: RuleContext, stack: str) -> tuple[str | None, str | None]:
    rt = ctx.section(stack, "runtime")
    package, version = rt.get("runtime_package"), rt.get("runtime_version")
    if version is None:
        fw = ctx.section(stack, "framework")
        key = {"mindspore-lite": "mindspore_lite", "mindspore": "mindspore"}.get(str(package), "")
        version = (fw.get(key) or {}).get("version") if key else None
    return package, version


def runtime_maximum(
    ctx: RuleContext, stack: str, package: str | None, version: str | None, summary: dict[str, Any]
) -> tuple[int, str] | None:
    """(the highest version of its format the stack's runtime reads for this file, where that
    is known from), or None."""
    if package is None or version is None:
        return None
    learned = ctx.learned_maxima.get((package, version))
    if learned is not None:
        when = f" on {learned.learned_at:%Y-%m-%d}" if learned.learned_at else ""
        return learned.max_mind_ir_version, f"learned from its own rejection message{when}"
    config = ctx.stacks.get(stack)
    spec = readers_facts(ctx.runtimes, config.runtime if config else None, package)
    return spec.reads(version, summary) if spec is not None and spec.reads is not None else None


def mindir_version(ctx: RuleContext) -> Iterable[Finding]:
    """One finding per pair (it is the runtime that cannot read the train stack's files),
    blocking every probe variant whose file is too new."""
    for pair in ctx.pairs:
        package, version = _runtime(ctx, pair.infer)
        fmt = ctx.loads(pair.infer)
        too_new, limit = [], None
        for model in ctx.variants(pair, pair.train):
            file_version = fmt.version(model.info)
            if not model.info.get("readable") or file_version is None:
                continue
            known = runtime_maximum(ctx, pair.infer, package, version, model.info)
            if known is None or file_version <= known[0]:
                continue  # unknown: the load is attempted, and a rejection teaches the maximum
            too_new.append(model)
            limit = limit or known
        if not too_new or limit is None:
            continue
        maximum, source = limit
        runtime = ctx.stacks[pair.infer].runtime if pair.infer in ctx.stacks else package
        file_version = max(fmt.version(m.info) or 0 for m in too_new)
        producers = sorted({str(fmt.producer(m.info)) for m in too_new if fmt.producer(m.info)})
        producer = ", ".join(producers)
        maker = fmt.producer_name or str(too_new[0].info.get("producer_name") or "the exporter")
        made_by = f"{maker} {producer}" if producer else maker
        train_config = ctx.stacks.get(pair.train)
        writers = writers_of(ctx.runtimes, train_config.runtime if train_config else None, fmt.name)
        fits = writers.get(maximum, f"writing version {maximum} or lower")
        title = fmt.title
        yield _finding(
            "mindir-version",
            "critical",
            pair.name,
            f"{pair.name}/{fmt.name}-version",
            f"{pair.infer} ({runtime} {version}) cannot load the {title} exported by {pair.train} "
            f"({made_by}): the file has {title} version {file_version}, the runtime reads "
            f"at most version {maximum} ({source}); the load was not attempted "
            f"({len(too_new)} probe variant{'s' if len(too_new) > 1 else ''})",
            {
                f"{fmt.version_field}": file_version,
                "format": fmt.name,
                "exported_by": producer,
                "runtime": runtime,
                "runtime_package": package,
                "runtime_version": version,
                f"runtime_max_{fmt.version_field}": maximum,
                "limit_source": source,
                "not_loaded": {f"{m.probe} [{m.variant}]": m.info.get("sha256") for m in too_new},
            },
            f"export with a {maker} release that writes {title} version {maximum} or lower ({fits}), "
            f"or upgrade {pair.infer} to a {package} release that reads version {file_version}"
            + (f" (the same release as the training {maker}, {producer})" if producer else ""),
            kind="incompatible",
            blocks=[{"pair": pair.name, "probe": m.probe, "variant": m.variant} for m in too_new],
        )


# -- operators the inference runtime cannot run --------------------------------------------


def operator_support(ctx: RuleContext) -> Iterable[Finding]:
    """One finding per pair whose infer stack is known not to run an operator of an exported
    model in any graph (``RuleContext.operator_limits``: the runtime plugin's table), blocking the
    variants that use it: the load would fail or hang."""
    for pair in ctx.pairs:
        limits = ctx.operator_limits.get(pair.infer) or {}
        if not limits:
            continue
        hits: dict[str, list[str]] = {}
        models = []
        for model in ctx.variants(pair, pair.train):
            ops = sorted(set(model.info.get("op_types") or ()) & set(limits))
            if model.info.get("readable") and ops:
                models.append(model)
                for op in ops:
                    hits.setdefault(op, []).append(f"{model.probe} [{model.variant}]")
        if not models:
            continue
        package, version = _runtime(ctx, pair.infer)
        runtime = ctx.stacks[pair.infer].runtime if pair.infer in ctx.stacks else package
        ops = sorted(hits)
        yield _finding(
            "operator-support",
            "warning",
            pair.name,
            f"{pair.name}/operator-support",
            f"unsupported operator: {', '.join(ops)}: {pair.infer} ({runtime} {version}) cannot run "
            f"the {ctx.loads(pair.infer).title} exported by {pair.train}: "
            + "; ".join(f"{op}: {limits[op]}" for op in ops)
            + "; the load was not attempted",
            {
                "operators": {op: limits[op] for op in ops},
                "used_by": hits,
                "runtime": runtime,
                "runtime_package": package,
                "runtime_version": version,
                "device": ctx.stacks[pair.infer].device if pair.infer in ctx.stacks else None,
            },
            f"replace {', '.join(ops)} in the exported graph (draw random numbers outside the model "
            f"and pass them as an input), or serve the model with a runtime that runs "
            f"{'it' if len(ops) == 1 else 'them'}",
            kind="unsupported",
            cause=(
                f"{pair.infer}/operator-support/{'+'.join(ops)}",
                f"unsupported operator: {', '.join(ops)}: {pair.infer} ({runtime} {version}) cannot run "
                + "; ".join(f"{op}: {limits[op]}" for op in ops)
                + "; the load was not attempted",
            ),
            blocks=[{"pair": pair.name, "probe": m.probe, "variant": m.variant} for m in models],
        )


# -- driver <-> firmware <-> CANN --------------------------------------------------------------


def _ranges(entries: Any) -> list[tuple[str, str]]:
    """[[start, end], ...] (or "start,end" strings, or single versions) as (start, end) pairs."""
    out: list[tuple[str, str]] = []
    for entry in entries or ():
        if isinstance(entry, str):
            parts = [p.strip() for p in entry.strip("[]").split(",")]
        elif isinstance(entry, (list, tuple)):
            parts = [str(p).strip() for p in entry]
        else:
            continue
        if len(parts) == 1 and parts[0]:
            out.append((parts[0], parts[0]))
        elif len(parts) == 2 and parts[0] and parts[1]:
            out.append((parts[0], parts[1]))
    return out


def in_version_range(version: str, start: str, end: str) -> bool:
    """FACTS.md: compared as strings cut to the longer of start/end, inclusive, so
    [24.1, 24.1.] holds every 24.1.* and [7.0.0, 7.7.99] holds 7.7.0.1.231."""
    cut = version[: max(len(start), len(end))]
    return start <= cut <= end


def _host_groups(ctx: RuleContext) -> dict[tuple[str, str], list[str]]:
    """Stacks that share one Ascend install (host and ascend_root), with a fingerprint."""
    groups: dict[tuple[str, str], list[str]] = {}
    for name, config in ctx.stacks.items():
        if ctx.fingerprints.get(name):
            groups.setdefault((config.host, config.ascend_root), []).append(name)
    return groups


def _host_severity(ctx: RuleContext, stacks: list[str]) -> str:
    """Critical where a stack uses the NPU, a warning where the stacks only share the host."""
    return "critical" if any(_on_npu(ctx, s) for s in stacks) else "warning"


def driver_firmware(ctx: RuleContext) -> Iterable[Finding]:
    for (host, root), stacks in _host_groups(ctx).items():
        driver, firmware = ctx.section(stacks[0], "driver"), ctx.section(stacks[0], "firmware")
        drv, fw = driver.get("version"), firmware.get("version")
        if not drv or not fw:
            continue
        fw_ranges = _ranges(driver.get("compatible_version_fw"))
        drv_ranges = _ranges(firmware.get("compatible_version_drv"))
        facts = {
            "driver_version": drv,
            "firmware_version": fw,
            "driver_compatible_version_fw": [list(r) for r in fw_ranges],
            "firmware_compatible_version_drv": [list(r) for r in drv_ranges],
            "ascend_root": root,
            "stacks": stacks,
        }
        fw_tuple = version_tuple(fw)
        if fw_tuple is not None and fw_tuple[:2] < (6, 4):
            reason = f"firmware {fw} is older than 6.4, which no driver supports"
        elif any(in_version_range(fw, a, b) for a, b in fw_ranges) or any(
            in_version_range(drv, a, b) for a, b in drv_ranges
        ):
            continue
        elif not fw_ranges and not drv_ranges:
            continue  # neither side says what it works with
        else:
            said = []
            if fw_ranges:
                said.append(f"driver {drv} takes firmware {_show(fw_ranges)}")
            if drv_ranges:
                said.append(f"firmware {fw} takes drivers {_show(drv_ranges)}")
            reason = "; ".join(said)
        yield _finding(
            "driver-firmware",
            _host_severity(ctx, stacks),
            host,
            f"{host}:{root}/driver-firmware",
            f"NPU driver {drv} and firmware {fw} under {root} ({host}) are not compatible: {reason}",
            facts,
            "install the firmware package released with this driver (or the driver released with "
            "this firmware), then reboot the host",
        )


def _show(ranges: list[tuple[str, str]]) -> str:
    return ", ".join(f"[{a}, {b}]" for a, b in ranges)


# The legacy sections holding install-info fields, for fingerprints without cann.choice.
INSTALL_SECTIONS = ("toolkit", "nnae", "nnrt")
_CODE = re.compile(r"^V(\d+)R(\d+)C(\d+)", re.IGNORECASE)


def release_code(innerversion: str | None) -> tuple[int, int, int] | None:
    """'V100R001C22SPC001B231' -> (100, 1, 22): the release code without SPC/B suffix."""
    m = _CODE.match(str(innerversion or "").strip())
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def _code_text(code: tuple[int, int, int]) -> str:
    return f"V{code[0]}R{code[1]:03d}C{code[2]:02d}"


def _code_in(code: tuple[int, int, int], entries: Any) -> bool:
    for start, end in _ranges(entries):
        a, b = release_code(start), release_code(end)
        if a is not None and b is not None and a <= code <= b:
            return True
    return False


def cann_driver(ctx: RuleContext) -> Iterable[Finding]:
    for (host, root), stacks in _host_groups(ctx).items():
        cann, driver = ctx.section(stacks[0], "cann"), ctx.section(stacks[0], "driver")
        # The package the stacks' runtimes load first (a Lite stack's nnrt, MindSpore's toolkit
        # or nnae), then the legacy sections; each speaks for itself: its own release and code.
        choices = [cann_choice.for_runtime(ctx, s) for s in stacks]
        loaded = [(c.package, c.probable) for c in choices if c is not None and c.package is not None]
        legacy = [(dict(cann[k], name=k), False) for k in INSTALL_SECTIONS if isinstance(cann.get(k), dict)]
        pkg, probable = next(
            ((p, pr) for p, pr in [*loaded, *legacy] if p.get("innerversion")), (None, False)
        )
        if pkg is None:
            continue
        cann_code = release_code(pkg.get("innerversion"))
        driver_code = release_code(driver.get("innerversion"))
        if cann_code is None or driver_code is None:
            continue
        driver_list, cann_list = driver.get("compatible_version"), pkg.get("compatible_version")
        if not driver_list and not cann_list:
            continue
        if _code_in(cann_code, driver_list) or _code_in(driver_code, cann_list):
            continue
        yield _finding(
            "cann-driver",
            "warning",
            host,
            f"{host}:{root}/cann-driver",
            f"CANN {pkg.get('version') or '(release unknown)'} ({pkg.get('name')} {_code_text(cann_code)}"
            + (", probably the one the stacks load" if probable else "")
            + f") and NPU driver {driver.get('version')} ({_code_text(driver_code)}) under {root} ({host}) "
            "do not list each other as compatible (inferred rule, unverified: the compatible_version lists "
            "of both)",
            {
                "cann_version": pkg.get("version"),
                "cann_package": pkg.get("id") or pkg.get("name"),
                "cann_package_probable": probable,
                "cann_innerversion": pkg.get("innerversion"),
                "cann_compatible_version": list(cann_list or []),
                "driver_version": driver.get("version"),
                "driver_innerversion": driver.get("innerversion"),
                "driver_compatible_version": list(driver_list or []),
                "ascend_root": root,
                "stacks": stacks,
            },
            "check Huawei's compatibility table for this CANN and driver; published pairs: CANN 8.2.RC1 "
            "with driver 25.0.rc1, CANN 8.0.RC3-8.1.RC1 with 24.1.rc2, CANN 8.0.RC1/RC2 with 24.1.rc1",
            inferred=True,
        )


def npu_firmware(ctx: RuleContext) -> Iterable[Finding]:
    """The firmware package on disk against the firmware each NPU reports (npu-smi's board
    view): a package installed but not yet running (no reboot after an upgrade), or a card
    that kept an older firmware. Compatibility judged from the file is then not what runs."""
    for (host, root), stacks in _host_groups(ctx).items():
        firmware, npu_smi = ctx.section(stacks[0], "firmware"), ctx.section(stacks[0], "npu_smi")
        on_disk, npus = firmware.get("version"), npu_smi.get("npus")
        if not on_disk or not isinstance(npus, dict):
            continue
        reported: dict[str, list[int]] = {}
        silent: list[int] = []
        for entry in npus.values():
            board = entry.get("board") if isinstance(entry, dict) else None
            running = board.get("firmware_version") if isinstance(board, dict) else None
            if running:
                reported.setdefault(str(running), []).append(entry.get("npu"))
            elif isinstance(entry, dict):
                silent.append(entry.get("npu"))
        other = {v: ids for v, ids in reported.items() if v != on_disk}
        if not other:
            continue
        said = [
            f"{_npu_list(ids)} {'reports' if len(ids) == 1 else 'report'} {v}"
            for v, ids in sorted(other.items())
        ]
        if silent:
            said.append(f"{_npu_list(silent)} did not say (no board view)")
        yield _finding(
            "npu-firmware",
            "warning",
            host,
            f"{host}:{root}/npu-firmware",
            f"NPU firmware on disk under {root} ({host}) is {on_disk}, but " + "; ".join(said),
            {
                "firmware_file": firmware.get("file"),
                "firmware_version": on_disk,
                "reported": {v: ids for v, ids in sorted(reported.items())},
                "no_board_view": silent,
                "ascend_root": root,
                "stacks": stacks,
            },
            "the cards do not run the installed firmware: activate it (reboot the host after the "
            "upgrade) or install the package the cards run; driver-firmware compatibility is judged "
            "on the file until then",
        )


def _npu_list(ids: list[Any]) -> str:
    shown = ", ".join(str(i) for i in sorted(ids, key=lambda i: (not isinstance(i, int), i)))
    return f"NPU {shown}" if len(ids) == 1 else f"NPUs {shown}"


# -- train <-> infer pairing -------------------------------------------------------------------


def _numerics_env(ctx: RuleContext, stack: str) -> dict[str, str]:
    """The environment variables that change numbers, minus those that name install paths
    (different on every host) and log levels."""
    env = ctx.section(stack, "environment")
    return {
        k: str(v)
        for k, v in env.items()
        if k not in ("unknown", "error") and not k.endswith(("PATH", "_HOME")) and not k.startswith("GLOG_")
    }


def runtime_package(ctx: RuleContext, stack: str) -> dict[str, Any] | None:
    """The entry of ``cann.packages`` the stack's runtime loads (auditor.rules.cann_choice), or None."""
    choice = cann_choice.for_runtime(ctx, stack)
    return choice.package if choice is not None else None


def _cann_side(ctx: RuleContext, stack: str) -> tuple[str | None, str | None, str | None, bool]:
    """(release, compiler Version=, package as shown, probable) of the CANN the stack's runtime
    loads; ``probable``: the choice is the auditor's inference (several packages installed and
    nothing in the stack's environment saying which), and the package is said "probably"."""
    choice = cann_choice.for_runtime(ctx, stack)
    if choice is None:  # a fingerprint from before cann.choice
        cann = ctx.section(stack, "cann")
        return cann.get("version"), cann.get("compiler_version"), None, False
    name = (choice.package or {}).get("name")
    probable = bool(choice.probable)
    return choice.release, choice.compiler, (f"{name}, probably" if name and probable else name), probable


def _cann_pair(ctx: RuleContext, pair: PairConfig) -> Finding | None:
    """Like with like: the releases of the packages each runtime loads; only when a side's
    release is unknown, the compilers' ``Version=`` major.minor (never a release against an
    internal build number: before 8.2 the compiler says 7.6 for CANN 8.0.0)."""
    (ra, ca, pa, guess_a), (rb, cb, pb, guess_b) = _cann_side(ctx, pair.train), _cann_side(ctx, pair.infer)
    if ra and rb:
        if ra.strip().lower() == rb.strip().lower():
            return None
        a, b, label, shown = ra, rb, "CANN", ""
        field = "release"
    elif ca and cb and major_minor(ca) and major_minor(cb):
        if major_minor(ca) == major_minor(cb):
            return None
        a, b, label, shown = ca, cb, "CANN compiler", f" ({major_minor(ca)} vs {major_minor(cb)})"
        field = "compiler_version"
    else:
        return None

    def side(value: str, package: str | None) -> str:
        return f"{label} {value}" + (f" ({package})" if package else "")

    # A side whose package is the auditor's guess is not known to differ: said, not warned.
    guessed = guess_a or guess_b
    return _finding(
        "train-infer-pairing",
        "info" if guessed else "warning",
        pair.name,
        f"{pair.name}/pairing-cann",
        f"{pair.name}: trained on {side(a, pa)}, served on {side(b, pb)}{shown}"
        + ("; which package a side loads is inferred, not read from its environment" if guessed else ""),
        {
            "train": a,
            "infer": b,
            "field": f"cann.{field}",
            "train_package": pa,
            "infer_package": pb,
        },
        "set ASCEND_HOME_PATH (or source the package's set_env.sh) in [stacks.X.env] so the auditor "
        "reads which CANN each side loads"
        if guessed
        else "run both stacks of the pair on the same CANN release, or audit the pair after every "
        "CANN upgrade on either side",
        aspect="cann",
        inferred=guessed,
    )


def _version_pair(ctx: RuleContext, pair: PairConfig) -> Finding | None:
    ms = ctx.section(pair.train, "framework").get("mindspore") or {}
    trained = ms.get("version") if isinstance(ms, dict) else None
    if trained is None:
        rt = ctx.section(pair.train, "runtime")
        trained = rt.get("runtime_version") if rt.get("runtime_package") == "mindspore" else None
    package, served = _runtime(ctx, pair.infer)
    if trained is None or served is None or package not in ("mindspore", "mindspore-lite"):
        return None
    if trained == served:
        return None
    lite = package == "mindspore-lite"
    # Another release of MindSpore reads the file with a warning of its own ("cross-major version
    # compatibility is not guaranteed", 2.10 on 2.0 files) and fails on the first call of some.
    cross = major_minor(trained) != major_minor(served)
    why = (
        " (MindSpore Lite is meant to match the MindSpore that exported the model)"
        if lite
        else f" (another release: MindSpore {served} does not guarantee it runs files of MindSpore "
        f"{trained}; measured on 2.0 files, 2.10 loads them all and fails on the first call of some)"
        if cross
        else ""
    )
    return _finding(
        "train-infer-pairing",
        "warning" if lite or cross else "info",
        pair.name,
        f"{pair.name}/pairing-version",
        f"{pair.name}: exported by MindSpore {trained}, served by {package} {served}" + why,
        {"train_mindspore": trained, "infer_package": package, "infer_version": served},
        f"serve with {package} {trained}, or export with MindSpore {served}",
        aspect="version",
    )


def _env_pair(ctx: RuleContext, pair: PairConfig) -> Finding | None:
    if not ctx.section(pair.train, "environment") or not ctx.section(pair.infer, "environment"):
        return None  # not collected on one side: unknown, not "unset"
    a, b = _numerics_env(ctx, pair.train), _numerics_env(ctx, pair.infer)
    differ = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    if not differ:
        return None
    words = [f"{k}={a.get(k, 'unset')} (train) vs {b.get(k, 'unset')} (infer)" for k in differ]
    return _finding(
        "train-infer-pairing",
        "warning",
        pair.name,
        f"{pair.name}/pairing-environment",
        f"{pair.name}: numerics-changing environment differs: " + "; ".join(words),
        {"variables": {k: {"train": a.get(k), "infer": b.get(k)} for k in differ}},
        "set these variables the same way on both stacks (stacks.NAME.env in auditor.toml, and the "
        "service environment in production)",
        aspect="environment",
    )


def train_infer_pairing(ctx: RuleContext) -> Iterable[Finding]:
    for pair in ctx.pairs:
        if not ctx.fingerprints.get(pair.train) or not ctx.fingerprints.get(pair.infer):
            continue
        for check in (_cann_pair, _version_pair, _env_pair):
            found = check(ctx, pair)
            if found is not None:
                yield found


def group_peers(ctx: RuleContext) -> Iterable[Finding]:
    """A group's member out of line with its peers (auditor.fleet.peers): one finding per
    member, every fact it differs in, with the majority's value and how many agree."""
    for base, names in peers.groups(list(ctx.stacks)).items():
        known = {n: fp for n in names if (fp := ctx.fingerprints.get(n))}
        if 0 < len(known) < peers.MIN_MEMBERS:
            yield _finding(
                "group-peers",
                "info",
                base,
                f"{base}/peers-not-compared",
                f"{base}: peers not compared ({len(known)} member{'s' if len(known) != 1 else ''} "
                f"fingerprinted in this run of {len(names)}; a majority to compare with needs "
                f"{peers.MIN_MEMBERS})",
                {"group_stack": base, "members": len(known), "configured": len(names)},
                "nothing to do where the group is this small; with [queue], each auditor compares "
                "the members it audited",
                kind="not-compared",
            )
            continue
        odd = peers.out_of_line(known)
        for member in sorted({o.member for o in odd}):
            mine = [o for o in odd if o.member == member]
            host = ctx.stacks[member].host if member in ctx.stacks else member
            yield _finding(
                "out-of-line",
                "warning",
                member,
                f"{member}/out-of-line",
                f"{member} is out of line with its group ({len(names)} hosts serving {base}): "
                + "; ".join(o.describe() for o in mine),
                {
                    "group_stack": base,
                    "host": host,
                    "members": len(names),
                    "facts": [
                        {
                            "fact": o.fact,
                            "value": o.value,
                            "majority": o.majority,
                            "agree": o.agree,
                            "total": o.total,
                        }
                        for o in mine
                    ],
                },
                f"bring {host} in line with its peers (or, if it leads an upgrade, the others with it)",
            )


RULES = (
    Rule(
        "mindspore-cann",
        "MindSpore's own list of supported CANN versions against the installed CANN compiler",
        mindspore_cann,
    ),
    Rule(
        "mindir-version",
        "an exported MindIR's version against the highest version the inference runtime reads",
        mindir_version,
        needs_artifacts=True,
    ),
    Rule(
        "operator-support",
        "an exported MindIR's operators against those the inference runtime is known not to run",
        operator_support,
        needs_artifacts=True,
    ),
    Rule(
        "runtime-cann",
        "the CANN each runtime would load: none on its paths, or checked and loaded CANN differ",
        runtime_finds_cann,
    ),
    Rule("driver-firmware", "NPU driver and firmware compatible_version ranges", driver_firmware),
    Rule("npu-firmware", "the firmware package on disk against the firmware each NPU reports", npu_firmware),
    Rule("cann-driver", "CANN and NPU driver innerversion codes (inferred rule)", cann_driver),
    Rule(
        "train-infer-pairing",
        "a pair's stacks on the same CANN, the same MindSpore/Lite version, the same numerics env",
        train_infer_pairing,
    ),
    Rule(
        "group-peers",
        "a group's members (stacks NAME@HOST) agree with their majority on every shared fact",
        group_peers,
    ),
)


@hookimpl
def auditor_rules() -> list[Rule]:
    return list(RULES)
