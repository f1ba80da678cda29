"""NPU telemetry: power, temperature, memory and HBM use, utilisation, ECC counts and health
of every NPU and chip of a host, read from ``npu-smi info -t <view> -i <npu>``.

Volatile by nature, so never part of a fingerprint: this module is not in the fingerprint's
collector list. The cycle (once per host) and the daemon's telemetry schedule ask a stack's
worker to run it (auditor.telemetry.sample); the values are stored as series, exported as
gauges and judged against ``[telemetry]`` thresholds by the auditor.

What is read (the printed formats, from npu-smi's source and published outputs, are in
tests/ascend_fixtures/telemetry/SOURCES.md):

- ``npu-smi info -l`` lists the NPUs (``NPU ID : N`` lines). Without npu-smi, or with ``There
  is no NPU card on this server.``, the host has no NPUs: ``available`` is false with the
  reason, and nothing else is asked. When npu-smi is there but cannot list them (it exits
  with a DCMI error, hangs), ``failed`` is true as well: nothing could be checked.
- then per NPU each view of ``context["views"]`` (auditor.worker.npu_metrics): ``Key : Value``
  lines in blocks, one per chip. ``Chip ID`` comes before a chip's lines in some views and
  releases and after them in others, so a block is what lies between blank lines and its
  chip is read anywhere in it; a block with ``Chip Name : MCU`` is the card's MCU (chip
  ``mcu``: on a 310P only the MCU reports the card's power); a view without ``Chip ID`` (the
  950's) describes chip 0.
- values npu-smi does not know (``NA``, ``-``, ``Failed``, ``NOT SUPPORT``) are left out, and
  so are the DDR columns of a chip whose DDR capacity is 0: a 910B prints 0 for memory it
  does not have, which would read as "idle".

A view that fails for one NPU (npu-smi exits non-zero and says why on stdout, e.g.
``dcmi module initialize failed. ret is -8005``) is recorded in that NPU's ``errors``; the
other views and NPUs are still read. A view the device does not offer (``This device does
not support querying ...``) is listed in ``unsupported``. Up to ``PARALLEL`` NPUs are read at
once, each NPU's views one after the other. A call that hangs is killed at the context's
``timeout``, and nothing more is asked of this host in this sample (the calls already running
end on their own): a stuck driver would only cost one timeout per remaining call.

Runs inside stacks: Python 3.7, standard library only.
"""

import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from auditor.plugins.collectors._files import TimedOut, Unreadable, find_executable

# npu-smi's views read as the fingerprint's npu_smi collector reads them: one view run with a
# deadline (npu-smi prints its errors on stdout and exits with the DCMI code & 0xFF, e.g. 187
# for -8005), Key : Value lines in blocks, a view split per chip.
from auditor.plugins.collectors._npu_smi_views import chip_blocks, kv_blocks, run_view

from auditor.worker.npu_metrics import DEFAULT_VIEWS, HEALTH_CODES, KEYS, SUMMED, VIEWS

NAME = "npu_telemetry"
PARALLEL = 4
"""NPUs read at once: npu-smi waits on the driver, and a worker process (Python 3.7, a runtime
loaded) takes tens of milliseconds to fork each call."""

_NUMBER = re.compile(r"^-?\d+(?:\.\d+)?$")
NO_CARD = "There is no NPU card"
NOT_OFFERED = "does not support querying"


def collect(context):
    configured = context.get("npu_smi") or "npu-smi"
    environ = context.get("environ") or {}
    timeout = float(context.get("timeout") or 10.0)
    views = [v for v in (context.get("views") or DEFAULT_VIEWS) if v in VIEWS]
    started = time.time()
    doc = {
        "available": False,
        "reason": None,
        "failed": False,
        "tool": configured,
        "npus": [],
        "calls": 0,
        "seconds": 0.0,
    }
    resolved = find_executable(configured, environ)
    if resolved is None:
        doc["reason"] = "%s: %s" % (configured, "not found" if "/" in configured else "not found on PATH")
        return doc
    doc["tool"] = resolved

    lock = threading.Lock()

    def view(args):
        with lock:
            doc["calls"] += 1
        return run_view(resolved, args, timeout, environ)[1]

    try:
        listing = view(["info", "-l"])
    except Unreadable as exc:
        doc["reason"], doc["failed"] = str(exc), True  # npu-smi is there: nothing could be checked
        return _done(doc, started)
    npus = parse_list(listing)
    if not npus:
        first = listing.strip().splitlines()[0].strip() if listing.strip() else ""
        said = first if NO_CARD in listing else "no 'NPU ID : N' line (it starts %r)" % listing.strip()[:60]
        doc["reason"] = "`%s info -l`: %s" % (resolved, said)
        return _done(doc, started)
    doc["available"] = True
    stuck = []  # set once a call timed out: the driver is stuck, nothing more is asked
    with ThreadPoolExecutor(max_workers=min(PARALLEL, len(npus))) as pool:
        doc["npus"] = list(pool.map(lambda npu: _npu(npu, views, view, stuck), npus))
    return _done(doc, started)


def _npu(npu, views, view, stuck):
    """One NPU's views, read one after the other."""
    entry = {"npu": npu, "chips": [], "errors": [], "unsupported": []}
    chips = {}
    for name in views:
        if stuck:
            entry["errors"].append("%s: not asked: an earlier npu-smi call timed out" % name)
            continue
        try:
            text = view(["info", "-t", name, "-i", str(npu)])
        except TimedOut as exc:
            entry["errors"].append(str(exc))
            stuck.append(True)
            continue
        except Unreadable as exc:
            if NOT_OFFERED in str(exc):
                entry["unsupported"].append(name)
            else:
                entry["errors"].append(str(exc))
            continue
        if NOT_OFFERED in text:
            entry["unsupported"].append(name)
            continue
        for chip, values in read_view(text):
            chips.setdefault(chip, {}).update(values)
    for chip in sorted(chips, key=_chip_order):
        values = _without_absent_ddr(chips[chip])
        if values:
            entry["chips"].append({"chip": chip, "values": values})
    return entry


def _done(doc, started):
    doc["seconds"] = round(time.time() - started, 4)
    return doc


def parse_list(text):
    """The NPU ids of ``npu-smi info -l``, in the order printed."""
    ids = []
    for block in kv_blocks(text):
        for key, value in block:
            if key == "NPU ID" and value.strip().isdigit() and int(value) not in ids:
                ids.append(int(value))
    return ids


def read_view(text):
    """[(chip, {metric: value})] of one ``-t`` view of one NPU. Chip is the ``Chip ID`` as
    text, ``mcu`` for the card's MCU, or the block's position among the chip blocks when
    the view prints no ``Chip ID`` (one chip: ``0``)."""
    out = []
    position = 0
    for block in chip_blocks(text):
        if block["mcu"]:
            chip = "mcu"
        else:
            chip = str(block["chip"]) if block["chip"] is not None else str(position)
            position += 1
        values = {}
        for key, raw in block["values"].items():
            metric = KEYS.get(key)
            value = _value(metric, raw) if metric is not None else None
            if value is None:
                continue
            if metric in SUMMED and metric in values:
                values[metric] += value
            else:
                values.setdefault(metric, value)
        if values:
            out.append((chip, values))
    return out


def _value(metric, raw):
    raw = raw.strip()
    if metric == "health":
        code = HEALTH_CODES.get(raw)
        return None if code is None else float(code)
    if not _NUMBER.match(raw):  # NA, -, Failed, NOT SUPPORT: npu-smi does not know it
        return None
    return float(raw)


def _without_absent_ddr(values):
    """A chip without DDR (910B, A3, 950: ``DDR Capacity(MB) : 0``) prints 0 for its DDR use;
    that 0 means "no such memory", not "idle", so none of the DDR figures are kept."""
    if values.get("memory_capacity_mb") == 0.0:
        return {k: v for k, v in values.items() if not k.startswith(("memory_", "ecc_ddr_"))}
    return values


def _chip_order(chip):
    return (1, 0) if chip == "mcu" else (0, int(chip) if chip.isdigit() else 0)
