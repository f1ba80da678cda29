"""History rows as a table (auditor.report.tables): #54 found rows of about 2,000 characters, a
finding's whole message in its last column. A table row shows the first line, cut; json and csv
keep every character."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime

from auditor.report.tables import MESSAGE_SHOWN, write_csv, write_json, write_table

COLUMNS = ("run_id", "started_at", "pair", "status", "message")
LONG = "ms20->lite20: " + "std 3/512 elements out of tolerance; " * 60 + "\nsecond line"


def rows() -> list[tuple]:
    at = datetime(2026, 12, 7, 10, 0)
    return [
        (1, at, "ms20->lite20", "drift", LONG),
        (2, at, "ms20->lite20", "consistent", "ok\nmore"),
        (3, at, "p", "error", None),
    ]


def test_a_table_row_stays_a_line_of_a_terminal() -> None:
    out = io.StringIO()
    assert write_table(out, COLUMNS, iter(rows())) == 3
    lines = out.getvalue().splitlines()
    assert len(lines) == 4 and max(len(line) for line in lines) <= 120 + MESSAGE_SHOWN
    assert lines[1].endswith("…") and "second line" not in out.getvalue()
    assert lines[1].split("  drift ")[1].strip() == LONG[: MESSAGE_SHOWN - 1].rstrip() + "…"
    assert lines[2].endswith("  ok …") and lines[3].endswith("  -")


def test_json_and_csv_keep_the_whole_message() -> None:
    out = io.StringIO()
    write_json(out, COLUMNS, rows())
    assert json.loads(out.getvalue())[0]["message"] == LONG
    out = io.StringIO()
    write_csv(out, COLUMNS, rows())
    assert list(csv.reader(io.StringIO(out.getvalue())))[1][-1] == LONG
