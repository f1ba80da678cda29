"""What ``npu-smi`` reports, per NPU and per chip: the driver it runs with, every chip's health
and bus, and each NPU's board (driver and firmware it reports, npu-smi's compatibility
verdict, chip count), plus the chip map.

Views read (parsing in ``_npu_smi_views``): ``npu-smi info`` (the box table: NPUs, chips,
health), ``npu-smi info -t board -i N`` for every NPU of the table, and ``npu-smi info -m``.
A board query that fails leaves that NPU's ``board`` null with the reason under
``unknown["npus.N.board"]``; the other NPUs keep theirs. Values npu-smi prints as ``NA`` are
null with the reason ``npu-smi prints NA`` (a SoC has no Bus-Id). Volatile values (power,
temperature, memory use, processes) are left out: they are not part of a fingerprint.

``npus`` is keyed by the NPU id as a string (JSON keys), so a change shows as the path of
the one value that changed. On a sick host npu-smi hangs in the driver: each run has the
context's ``timeout`` and its process group is killed at it; after a timeout no further view
is tried, and all runs together stay within ``CALLS`` timeouts (the worker's deadline for a
fingerprint allows that many: ``auditor.fingerprint.collect.NPU_SMI_CALLS``).
"""

import time

from auditor.plugins.collectors._files import TimedOut, Unreadable, find_executable
from auditor.plugins.collectors._npu_smi_views import (
    NotAView,
    known,
    kv_first,
    missing,
    parse_chip_map,
    parse_table,
    run_view,
    worst_health,
)

NAME = "npu_smi"
CALLS = 3
# -t board labels -> the board's fields; each is null with a reason when not printed or NA.
BOARD_KEYS = (
    ("Software Version", "software_version"),
    ("Firmware Version", "firmware_version"),
    ("Compatibility", "compatibility"),
    ("Chip Count", "chip_count"),
)
# Kept when printed and known (absent otherwise): they identify the card, they judge nothing.
BOARD_EXTRA = (
    ("Product Name", "product_name"),
    ("Serial Number", "serial_number"),
    ("PCIe Bus Info", "pcie_bus_info"),
    ("Faulty Chip Count", "faulty_chip_count"),
)
PRINTS_NA = "npu-smi prints NA"


class Budget(object):
    """The time npu-smi may take in one fingerprint: ``calls`` timeouts in all, and nothing
    more once one run has timed out (the driver is stuck)."""

    def __init__(self, timeout, calls=CALLS):
        self.timeout = timeout
        self.until = time.monotonic() + calls * timeout
        self.stuck = None

    def run(self, executable, args, environ):
        if self.stuck is not None:
            raise Unreadable("not tried: %s" % self.stuck)
        allowance = "npu-smi used the %g s this fingerprint allows it" % (CALLS * self.timeout)
        left = self.until - time.monotonic()
        if left <= 0:
            raise Unreadable("not tried: %s" % allowance)
        try:
            return run_view(executable, args, min(self.timeout, left), environ)
        except TimedOut as exc:
            if left < self.timeout:  # cut short by the allowance, not stuck in the driver
                raise Unreadable(
                    "`%s %s`: stopped when %s" % (executable, " ".join(args), allowance)
                ) from None
            self.stuck = str(exc)
            raise


def collect(context):
    unknown = {}
    configured = context.get("npu_smi") or "npu-smi"
    environ = context.get("environ") or {}
    budget = Budget(float(context.get("timeout") or 10.0))
    doc = {
        "path": configured,
        "resolved": None,
        "available": False,
        "tool_version": None,
        "driver_version": None,
        "count": None,
        "chip_count": None,
        "chips": None,
        "npus": None,
        "chip_map": None,
        "unknown": unknown,
    }
    fields = ("tool_version", "driver_version", "count", "chip_count", "chips", "npus", "chip_map")
    resolved = find_executable(configured, environ)
    if resolved is None:
        where = "not found" if "/" in configured else "not found on PATH"
        for key in ("resolved",) + fields:
            unknown[key] = "%s: %s" % (configured, where)
        return doc
    doc["resolved"] = resolved
    try:
        table = parse_table(*budget.run(resolved, ["info"], environ))
    except (Unreadable, NotAView) as exc:
        for key in fields:
            unknown[key] = str(exc)
        if budget.stuck is not None:
            unknown["chip_map"] = "not tried: %s" % exc
        return doc
    doc["available"] = True
    doc["tool_version"], doc["driver_version"] = table["tool_version"], table["driver_version"]
    for key in ("tool_version", "driver_version"):
        if doc[key] is None:
            unknown[key] = "`%s info`: no 'npu-smi X  Version: Y' header line" % resolved
    doc["chips"] = table["chips"]
    doc["count"], doc["chip_count"] = len(table["npus"]), len(table["chips"])
    for chip in table["chips"]:
        if chip["bus_id"] is None:
            unknown["chips.%d.%d.bus_id" % (chip["npu"], chip["chip"])] = PRINTS_NA
    doc["npus"] = {}
    for npu in table["npus"]:
        mine = [c for c in table["chips"] if c["npu"] == npu["npu"]]
        entry = {
            "npu": npu["npu"],
            "name": npu["name"],
            "health": worst_health([c["health"] for c in mine]) or npu["health"],
            "chip_count": len(mine),
            "board": None,
        }
        doc["npus"][str(npu["npu"])] = entry
        try:
            run = budget.run(resolved, ["info", "-t", "board", "-i", str(npu["npu"])], environ)
            entry["board"] = parse_board(run, "npus.%d.board" % npu["npu"], unknown)
        except (Unreadable, NotAView) as exc:
            unknown["npus.%d.board" % npu["npu"]] = str(exc)
    if not table["npus"]:
        unknown["npus"] = "`%s info`: the table lists no NPU" % resolved
    try:
        doc["chip_map"] = parse_chip_map(*budget.run(resolved, ["info", "-m"], environ))
    except (Unreadable, NotAView) as exc:
        unknown["chip_map"] = str(exc)
    return doc


def parse_board(run, where, unknown):
    """One NPU's ``-t board`` view: the fields of BOARD_KEYS (null with the reason under
    ``unknown["<where>.<field>"]`` when not printed or NA) and those of BOARD_EXTRA that are
    printed and known. Raises NotAView when none of BOARD_KEYS is printed."""
    command, text = run
    values = kv_first(text)
    if not any(label in values for label, _ in BOARD_KEYS):
        raise NotAView(
            "%s: no 'Software Version : ...' lines in the output (it starts %r)"
            % (command, text.strip()[:60])
        )
    board = {}
    for label, key in BOARD_KEYS:
        value = values.get(label)
        if value is None:
            unknown["%s.%s" % (where, key)] = "npu-smi prints no %s line for this board" % label
        elif missing(value):
            unknown["%s.%s" % (where, key)] = PRINTS_NA
        board[key] = known(value)
    for label, key in BOARD_EXTRA:
        if known(values.get(label)) is not None:
            board[key] = known(values[label])
    for key in ("chip_count", "faulty_chip_count"):
        if board.get(key) is not None and board[key].isdigit():
            board[key] = int(board[key])
    return board
