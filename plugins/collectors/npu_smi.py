"""What ``npu-smi`` reports: driver version, NPUs and their health, board firmware and
driver/firmware compatibility, chip names.

Three views are read: ``npu-smi info`` (the box table: 910B rows ``NPU Name | Health`` then
``Chip | Bus-Id``; 310P rows add a ``Device`` column and may list several chips per NPU),
``npu-smi info -t board -i <first NPU>`` (``Key : Value`` lines) and ``npu-smi info -m``
(columns split by two or more spaces; MCU rows skipped). Volatile values (power,
temperature, memory use, processes) are left out: they are not part of a fingerprint.

On a sick host npu-smi hangs in the driver: each run has the context's ``timeout`` and its
process group is killed at it; after a timeout the other views are not tried.
"""

import re

from auditor.plugins.collectors._files import (
    TimedOut,
    Unreadable,
    describe_bytes,
    find_executable,
    run_command,
)

NAME = "npu_smi"
BOARD_KEYS = {
    "Software Version": "software_version",
    "Firmware Version": "firmware_version",
    "Compatibility": "compatibility",
    "Chip Count": "chip_count",
}

_HEADER = re.compile(r"npu-smi\s+(\S+)\s+Version:\s*(\S+)")
_NPU_ROW = re.compile(r"^(\d+)\s+(\S.*)$")
_CHIP_ROW = re.compile(r"^(\d+)(?:\s+(\d+))?$")
_BUS_ID = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]$")
_HEALTH = re.compile(r"^[A-Za-z][A-Za-z _-]*$")
_SECOND_COLUMN = {"device": "device", "phy-id": "phy_id"}
_MAP_KEYS = {
    "NPU ID": "npu",
    "Chip ID": "chip",
    "Chip Logic ID": "logic_id",
    "Chip Phy-ID": "phy_id",
    "Slot ID": "slot_id",
    "Chip Name": "name",
}
_MAP_LABEL = re.compile(r"NPU ID|Chip Logic ID|Chip Phy-ID|Chip ID|Slot ID|Chip Name")
_BOARD_LINE = re.compile(r"^\s*([A-Za-z][^:]*?)\s*:\s*(.*?)\s*$")


class NotATable(ValueError):
    pass


def collect(context):
    unknown = {}
    configured = context.get("npu_smi") or "npu-smi"
    environ = context.get("environ") or {}
    timeout = float(context.get("timeout") or 10.0)
    doc = {
        "path": configured,
        "resolved": None,
        "available": False,
        "tool_version": None,
        "driver_version": None,
        "count": None,
        "chip_count": None,
        "chips": None,
        "board": None,
        "chip_map": None,
        "unknown": unknown,
    }
    fields = ("tool_version", "driver_version", "count", "chip_count", "chips", "board", "chip_map")
    resolved = find_executable(configured, environ)
    if resolved is None:
        where = "not found" if "/" in configured else "not found on PATH"
        for key in ("resolved",) + fields:
            unknown[key] = "%s: %s" % (configured, where)
        return doc
    doc["resolved"] = resolved
    try:
        info = parse_info(_run(resolved, ["info"], timeout, environ))
    except (Unreadable, NotATable) as exc:
        for key in fields:
            unknown[key] = str(exc)
        if isinstance(exc, TimedOut):
            # The driver is stuck; asking again would only cost two more timeouts.
            for key in ("board", "chip_map"):
                unknown[key] = "not tried: %s" % exc
        return doc
    doc["available"] = True
    doc.update(info)
    for key in ("tool_version", "driver_version"):
        if doc[key] is None:
            unknown[key] = "`%s info`: no 'npu-smi X  Version: Y' header line" % resolved
    first = doc["chips"][0]["npu"] if doc["chips"] else 0
    try:
        doc["board"] = parse_board(
            _run(resolved, ["info", "-t", "board", "-i", str(first)], timeout, environ)
        )
    except (Unreadable, NotATable) as exc:
        unknown["board"] = str(exc)
    try:
        doc["chip_map"] = parse_chip_map(_run(resolved, ["info", "-m"], timeout, environ))
    except (Unreadable, NotATable) as exc:
        unknown["chip_map"] = str(exc)
    return doc


def _run(executable, args, timeout, environ):
    """The text output of one npu-smi view, or Unreadable saying why there is none."""
    result = run_command([executable] + args, timeout, environ=environ or None)
    command = "`%s`" % result.command
    if result.returncode != 0:
        raise Unreadable("%s: exit status %d: %s" % (command, result.returncode, result.error_tail()))
    problem = describe_bytes(result.stdout)
    if problem:
        raise Unreadable("%s: %s output" % (command, problem))
    return command, result.text()


def parse_info(run):
    """tool_version, driver_version, count (NPUs) and chips from the ``npu-smi info`` table.

    Multi-chip cards print the NPU row again before each chip's row (an Atlas 300I Duo lists
    ``| 2  310P3 | OK |`` twice, once per chip; an A3 node lists each card's two dies the
    same way), so NPUs are counted by distinct NPU id and chips by chip rows, never by table
    rows. The chip row's second number is named by the header: ``Chip  Device`` (310P) or
    ``Chip  Phy-ID`` (A3)."""
    command, text = run
    tool_version = driver_version = None
    npus = {}  # NPU id -> {"npu", "name", "health"}, in the order first seen
    chips = []
    current = None
    in_table = False
    second = None  # what the chip row's second number is: "device", "phy_id"
    for line in text.splitlines():
        header = _HEADER.search(line)
        if header and tool_version is None:
            tool_version, driver_version = header.groups()
            continue
        if not line.strip().startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if "Health" in cells[1:2] or (cells[0].startswith("NPU") and "Name" in cells[0]):
            in_table = True
            continue
        if in_table and cells[0].startswith("Chip") and "Bus-Id" in cells[1:2]:
            words = cells[0].split()[1:]
            second = _SECOND_COLUMN.get(words[0].lower(), words[0].lower()) if words else None
            continue
        if any("Process" in c for c in cells):
            break  # the process table: volatile, and its rows look like chip rows
        if not in_table or len(cells) < 2:
            continue
        chip = _CHIP_ROW.match(cells[0])
        if chip and _BUS_ID.match(cells[1]) and current is not None:
            entry = {
                "npu": current["npu"],
                "chip": int(chip.group(1)),
                "name": current["name"],
                "health": current["health"],
            }
            if chip.group(2) is not None:
                entry[second or "device"] = int(chip.group(2))
            chips.append(entry)
            continue
        row = _NPU_ROW.match(cells[0])
        if row and _HEALTH.match(cells[1]):
            current = {"npu": int(row.group(1)), "name": row.group(2).strip(), "health": cells[1]}
            npus.setdefault(current["npu"], current)
    if not npus and tool_version is None:
        raise NotATable("%s: no NPU table in the output (it starts %r)" % (command, text.strip()[:60]))
    counted = {}
    for entry in chips:
        counted[entry["npu"]] = counted.get(entry["npu"], 0) + 1
    for npu in npus.values():
        if not counted.get(npu["npu"]):  # an NPU row without its chip row: keep the NPU, chip unknown
            chips.append({"npu": npu["npu"], "chip": None, "name": npu["name"], "health": npu["health"]})
    chips.sort(key=lambda c: (c["npu"], -1 if c["chip"] is None else c["chip"]))
    return {
        "tool_version": tool_version,
        "driver_version": driver_version,
        "count": len(npus),
        "chip_count": sum(1 for c in chips if c["chip"] is not None),
        "chips": chips,
    }


def parse_board(run):
    """software_version (driver), firmware_version, compatibility and chip_count of one board."""
    command, text = run
    values = {}
    for line in text.splitlines():
        match = _BOARD_LINE.match(line)
        if match:
            values.setdefault(match.group(1), match.group(2))
    board = {}
    for label, key in BOARD_KEYS.items():
        value = values.get(label)
        if key == "chip_count" and value is not None and value.isdigit():
            value = int(value)
        board[key] = value
    if all(v is None for v in board.values()):
        raise NotATable(
            "%s: no 'Software Version : ...' lines in the output (it starts %r)"
            % (command, text.strip()[:60])
        )
    return board


def parse_chip_map(run):
    """[{npu, chip, logic_id, name} (+ phy_id where printed)] from ``npu-smi info -m``.

    Columns are found by the header's labels, not by position: A3-class systems add
    ``Chip Phy-ID`` (newer ones also ``Slot ID``) before ``Chip Name``. Rows are split on
    whitespace: every column but the last (the name, which may hold a space, as in
    ``Ascend 310P3``) is one token. MCU rows (name ``Mcu``, or no logic id) are not chips."""
    command, text = run
    rows = []
    labels = None
    for line in text.splitlines():
        if labels is None:
            found = _MAP_LABEL.findall(line)
            if found[:2] == ["NPU ID", "Chip ID"]:
                labels = [_MAP_KEYS[label] for label in found]
            continue
        tokens = line.split()
        if len(tokens) < len(labels) or not tokens[0].isdigit():
            continue
        name_at = labels.index("name") if "name" in labels else len(labels) - 1
        values = dict(zip(labels[:name_at], tokens[:name_at]))
        values["name"] = " ".join(tokens[name_at : name_at + 1 + len(tokens) - len(labels)])
        logic = values.get("logic_id", "")
        if values["name"].lower().startswith("mcu") or not logic.isdigit():
            continue
        entry = {
            "npu": int(values["npu"]),
            "chip": int(values["chip"]) if values.get("chip", "").isdigit() else None,
            "logic_id": int(logic),
            "name": values["name"],
        }
        if "phy_id" in values:
            entry["phy_id"] = int(values["phy_id"]) if values["phy_id"].isdigit() else None
        rows.append(entry)
    if labels is None:
        raise NotATable(
            "%s: no 'NPU ID  Chip ID ...' header in the output (it starts %r)" % (command, text.strip()[:60])
        )
    return rows
