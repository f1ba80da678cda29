"""``npu-smi``'s printed views read as data: the ``info`` box table, the ``Key : Value`` views
(``-t board``, ``-t health``, ``-t power``, ...), the ``-m`` chip map, and running one view
with a deadline. Shared by the ``npu_smi`` collector and anything that samples npu-smi later
(telemetry), so both read the tool the same way.

What the tool prints (its source, the CANN driver repository's ``npucli``, and published
outputs; notes in FACTS.md §3):

- key/value views: a TAB, the key padded to 30, `` : ``, the value (docs show the TAB as 8
  spaces, some pages collapse the padding): split on the first ``:``, never by column;
- values may be ``NA`` or ``-`` (not known on this board: a SoC has no Bus-Id, a container no
  serial number); ``missing()`` turns those into None;
- errors go to stdout (``dcmi module initialize failed. ret is -8005``), and the exit status
  is the negative code ``& 0xFF`` (187 for -8005);
- the box table's layout depends on the product: ``| NPU  Name | Health |`` then ``| Chip
  [Device|Phy-ID] | Bus-Id |`` per chip (310, 310P, 310B, 910, 910B, A3), or ``| NPU ID |
  Name | Health |`` then a row with two empty cells (950). Cells are read by ``|`` and
  whitespace, never by offsets: column widths changed between releases.

Runs inside stacks: Python 3.7, standard library only.
"""

import re

from auditor.plugins.collectors._files import Unreadable, describe_bytes, run_command

NOT_KNOWN = ("", "NA", "N/A", "-", "--")
HEALTH_ORDER = ("OK", "Warning", "Alarm", "Critical")

_HEADER = re.compile(r"npu-smi\s+(\S+)\s+Version:\s*(\S+)")
_KV = re.compile(r"^\s*([^:]*?)\s*:\s?(.*?)\s*$")
_BUS_ID = re.compile(r"^[0-9A-Za-z]{4,8}:[0-9A-Za-z]{2}:[0-9A-Za-z]{2}\.[0-9A-Za-z]{1,2}$")
_NPU_ROW = re.compile(r"^(\d+)\s+(\S.*)$")
_CHIP_ROW = re.compile(r"^(\d+)(?:\s+(\d+))?$")
_MAP_LABEL = re.compile(r"NPU ID|Chip Logic ID|Chip Phy-ID|Chip ID|Slot ID|Chip Name")
_MAP_KEYS = {
    "NPU ID": "npu",
    "Chip ID": "chip",
    "Chip Logic ID": "logic_id",
    "Chip Phy-ID": "phy_id",
    "Slot ID": "slot_id",
    "Chip Name": "name",
}
_SECOND_COLUMN = {"device": "device", "phy-id": "phy_id"}
# Rows of `-m` that are not NPU chips: the card's MCU and its control CPU (source: npucli).
_NOT_CHIPS = ("mcu", "3559")


class NotAView(ValueError):
    """The output is not the view that was asked for; the message quotes its start."""


def missing(value):
    """True for the values npu-smi prints when it does not know one (``NA``, ``-``, empty)."""
    return value is None or value.strip() in NOT_KNOWN


def known(value):
    """``value`` stripped, or None when npu-smi printed NA / - / nothing."""
    return None if missing(value) else value.strip()


def worst_health(values):
    """The worst of several chips' health words (OK < Warning < Alarm < Critical; anything
    else, such as UNKNOWN, after those), or None for none."""
    values = [v for v in values if v]
    if not values:
        return None
    return max(values, key=lambda v: HEALTH_ORDER.index(v) if v in HEALTH_ORDER else len(HEALTH_ORDER))


def run_view(executable, args, timeout, environ=None):
    """(the command as shown, its text output) of one npu-smi view, or Unreadable saying why
    there is none: a non-zero exit (with npu-smi's own message, which it prints on stdout),
    a timeout (``TimedOut``), or output that is not text."""
    result = run_command([executable] + list(args), timeout, environ=environ or None)
    command = "`%s`" % result.command
    if result.returncode != 0:
        raise Unreadable("%s: exit status %d: %s" % (command, result.returncode, result.error_tail()))
    problem = describe_bytes(result.stdout)
    if problem:
        raise Unreadable("%s: %s output" % (command, problem))
    return command, result.text()


# -- key/value views --------------------------------------------------------------------------
def kv_blocks(text):
    """The ``Key : Value`` lines of a view as blocks (blank lines part them): a list of lists of
    (key, value). A line with an empty key continues the previous value (``-t health`` prints
    each further error description that way) and is kept as ("", value)."""
    blocks, current = [], []
    for line in text.splitlines():
        if not line.strip():
            if current:
                blocks.append(current)
                current = []
            continue
        match = _KV.match(line)
        if match is None:
            continue
        current.append((match.group(1), match.group(2)))
    if current:
        blocks.append(current)
    return blocks


def kv_first(text):
    """Every key of a view with its first value (one NPU's ``-t board``, say)."""
    values = {}
    for block in kv_blocks(text):
        for key, value in block:
            if key:
                values.setdefault(key, value)
    return values


def chip_blocks(text):
    """A multi-chip ``-t`` view split per chip: ``[{"chip": id or None, "mcu": bool, "values":
    {key: value}}]``. ``Chip ID`` comes before a chip's lines in some views and after them in
    others (``-t usages``), so a block is what lies between blank lines and its chip is read
    anywhere in it; an MCU block says ``Chip Name : MCU`` and has no ``Chip ID``. The header
    block (``NPU ID``, ``Chip Count``) is left out."""
    out = []
    for block in kv_blocks(text):
        values = {}
        for key, value in block:
            if key:
                values.setdefault(key, value)
        if set(values) <= {"NPU ID", "Chip Count", "Total Count", "Card Count"}:
            continue
        chip = values.pop("Chip ID", None)
        mcu = (values.get("Chip Name") or "").strip().lower() == "mcu"
        out.append(
            {
                "chip": int(chip) if chip is not None and chip.strip().isdigit() else None,
                "mcu": mcu,
                "values": values,
            }
        )
    return out


# -- the box table ----------------------------------------------------------------------------
def _is_bus(cell):
    return bool(_BUS_ID.match(cell)) or cell == "NA"


def parse_table(command, text):
    """``npu-smi info`` as ``{"tool_version", "driver_version", "npus": [{npu, name,
    health}], "chips": [{npu, chip, name, health, bus_id, [device | phy_id]}]}``.

    A card of several chips (300I Duo, 310, A3) prints its NPU row again before each chip's
    row, so NPUs are counted by distinct id and chips by chip rows. The chip row's second
    number is named by the header (``Chip  Device``: the device logic id; ``Chip  Phy-ID``).
    A Bus-Id of ``NA`` (a SoC, a UB mainboard) keeps the chip and gives ``bus_id`` None. The
    950 table prints no chip number: a card's chips are numbered in the order printed. The
    process table that follows is volatile and its rows look like chip rows: reading stops
    at its header. Raises NotAView when there is no table."""
    tool_version = driver_version = None
    npus, chips = [], []
    seen = set()
    current = None
    in_table = wide = False
    second = None
    for line in text.splitlines():
        header = _HEADER.search(line)
        if header and tool_version is None:
            tool_version, driver_version = header.groups()
            continue
        stripped = line.strip()
        if not stripped.startswith("|"):
            continue
        cells = [c.strip() for c in stripped.strip("|").split("|")]
        if any(c.startswith("Process id") for c in cells):
            break  # the process table
        if "Health" in cells[1:3] and ("Name" in cells[0] or "Name" in cells[1:2]):
            in_table, wide = True, cells[0] == "NPU ID"
            continue
        if in_table and "Bus-Id" in cells[1:3]:
            words = cells[0].split()[1:]
            second = _SECOND_COLUMN.get(words[0].lower(), words[0].lower()) if words else None
            continue
        if not in_table or len(cells) < (4 if wide else 3):
            continue
        if wide:
            if cells[0].isdigit() and cells[2]:
                current = {"npu": int(cells[0]), "name": cells[1], "health": cells[2]}
            elif not cells[0] and not cells[1] and _is_bus(cells[2]) and current is not None:
                index = sum(1 for c in chips if c["npu"] == current["npu"])
                chips.append(_chip(current, index, cells[2]))
                continue
            else:
                continue
        else:
            chip = _CHIP_ROW.match(cells[0])
            if chip and _is_bus(cells[1]) and current is not None:
                entry = _chip(current, int(chip.group(1)), cells[1])
                if chip.group(2) is not None:
                    entry[second or "device"] = int(chip.group(2))
                chips.append(entry)
                continue
            row = _NPU_ROW.match(cells[0])
            if not (row and cells[1] and not _is_bus(cells[1])):
                continue
            current = {"npu": int(row.group(1)), "name": row.group(2).strip(), "health": cells[1]}
        if current["npu"] not in seen:
            seen.add(current["npu"])
            npus.append(current)
    if not npus and tool_version is None:
        raise NotAView("%s: no NPU table in the output (it starts %r)" % (command, text.strip()[:60]))
    return {"tool_version": tool_version, "driver_version": driver_version, "npus": npus, "chips": chips}


def _chip(npu, index, bus):
    return {
        "npu": npu["npu"],
        "chip": index,
        "name": npu["name"],
        "health": npu["health"],
        "bus_id": known(bus),
    }


# -- the chip map -----------------------------------------------------------------------------
def parse_chip_map(command, text):
    """``[{npu, chip, logic_id, name} (+ phy_id, slot_id where printed)]`` from ``npu-smi info
    -m``. Columns are found by the header's labels, not by position: A3 adds ``Chip Phy-ID``,
    the 950 prints ``Slot ID`` and ``Chip Phy-ID`` and no logic id. Every column but the last
    (the name, which may hold a space: ``Ascend 310P3``) is one token. MCU and control-CPU
    rows (``Mcu``, ``3559``, logic id ``-``) are not chips. Raises NotAView without a header."""
    rows = []
    labels = None
    for line in text.splitlines():
        if labels is None:
            found = _MAP_LABEL.findall(line)
            if "NPU ID" in found and "Chip ID" in found and "Chip Name" in found:
                labels = [_MAP_KEYS[label] for label in found]
            continue
        tokens = line.split()
        if len(tokens) < len(labels) or not tokens[0].isdigit():
            continue
        name_at = labels.index("name")
        values = dict(zip(labels[:name_at], tokens[:name_at]))
        values["name"] = " ".join(tokens[name_at:])
        logic = values.get("logic_id")
        if values["name"].lower() in _NOT_CHIPS or (logic is not None and not logic.isdigit()):
            continue
        entry = {"npu": int(values["npu"]), "chip": _int(values.get("chip")), "name": values["name"]}
        for key in ("logic_id", "phy_id", "slot_id"):
            if key in values:
                entry[key] = _int(values[key])
        rows.append(entry)
    if labels is None:
        raise NotAView(
            "%s: no 'NPU ID  Chip ID ...' header in the output (it starts %r)" % (command, text.strip()[:60])
        )
    return rows


def _int(value):
    return int(value) if value is not None and value.isdigit() else None
