"""``auditor report``: a self-contained HTML page, checked as markup and as rendered by headless
Chromium (Debian's ``chromium``, installed by scripts/setup)."""

from __future__ import annotations

import base64
import html as html_module
import io
import shutil
import sqlite3
import subprocess
from datetime import datetime, timedelta
from html.parser import HTMLParser

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image
from sqlalchemy import delete, insert, select, text

from auditor.cli.main import cli
from auditor.db import schema as m
from auditor.history.store import Store
from auditor.report.html import side_findings
from tests.history_fixtures import DRIFTING_PAIR, UPGRADED_STACK, UPGRADED_VERSION, generate_history
from tests.report_fixtures import failing_cycle
from tests.requires import require

START = datetime(2026, 4, 1)
RUNS = 192  # two days, 15 minutes apart; lite20 upgraded half-way
PAIRS = ("ms20->lite20", "ms20->ms210-graph", "ms210->lite20", "ms210->ms210-graph")
SERVED = tuple(p for p in PAIRS if p != "ms210->lite20")  # the incompatible pair has no serving side
HEADINGS = [f"{pair} · ppo_policy [fp32]" for pair in PAIRS] + [
    f"{pair} · ppo_policy [fp32] · throughput" for pair in SERVED
]
"""A plot each: divergence and latency per pair, then the serving side's throughput (derived
from its latencies, auditor.history.figures)."""
PLOTS = len(HEADINGS)


class Page(HTMLParser):
    """The parts of the report the tests look at."""

    def __init__(self) -> None:
        super().__init__()
        self.imgs: list[dict[str, str]] = []
        self.h2: list[str] = []
        self.h3: list[str] = []
        self.rows: list[list[str]] = []
        self.row_classes: list[str] = []
        self.captions: list[str] = []
        self._in: str | None = None
        self._text: list[str] = []
        self.scripts = 0
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img":
            self.imgs.append(a)
        elif tag in ("h2", "h3", "td", "th", "figcaption"):
            self._in, self._text = tag, []
        elif tag == "tr":
            self.rows.append([])
            self.row_classes.append(a.get("class") or "")
        elif tag == "script":
            self.scripts += 1
        elif tag in ("link", "a") and (a.get("href") or "").startswith("http"):
            self.links.append(a["href"])

    def handle_endtag(self, tag):
        if tag == self._in:
            value = "".join(self._text).strip()
            {"h2": self.h2, "h3": self.h3, "figcaption": self.captions}.get(
                tag, self.rows[-1] if self.rows else []
            ).append(value)
            self._in = None

    def handle_data(self, data):
        if self._in:
            self._text.append(data)


def parse(html_text: str) -> Page:
    p = Page()
    p.feed(html_text)
    return p


def decode_png(src: str) -> Image.Image:
    prefix = "data:image/png;base64,"
    assert src.startswith(prefix)
    data = base64.b64decode(src[len(prefix) :], validate=True)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    img = Image.open(io.BytesIO(data))
    img.load()
    return img


@pytest.fixture(scope="module")
def db(tmp_path_factory, history_template):
    path = tmp_path_factory.mktemp("report") / "history.db"
    shutil.copyfile(history_template, path)
    store = Store.open(f"sqlite:///{path}")
    info = generate_history(store.engine, RUNS, start=START)
    with store.engine.begin() as conn:
        conn.execute(
            insert(m.Alert).values(
                key=f"{DRIFTING_PAIR}/ppo_policy/fp32/drift",
                state="open",
                kind="drift",
                severity="warning",
                subject=DRIFTING_PAIR,
                message="mean: 256/256 elements out of tolerance <since the upgrade>",
                details={},
                opened_at=info.upgrade_at,
                opened_run_id=info.upgrade_run_id,
                last_seen_at=info.last,
                last_seen_run_id=info.run_ids[-1],
                notifications=1,
            )
        )
        conn.execute(
            insert(m.Alert).values(
                key="old/resolved",
                state="resolved",
                kind="error",
                severity="error",
                subject="ms20->ms210-graph",
                message="a resolved alert is not shown",
                details={},
                opened_at=START,
                last_seen_at=START,
                resolved_at=START,
                notifications=1,
            )
        )
    store.close()
    return path, info


def report(path, out, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(
        cli, ["--db", str(path), "report", "--out", str(out), *args], catch_exceptions=False
    )
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def page(db, tmp_path_factory):
    path, _ = db
    out = tmp_path_factory.mktemp("out") / "report.html"
    code, stdout, stderr = report(path, out)
    assert code == 0, stderr
    return out, stdout


def test_report_is_one_self_contained_page(page, db):
    out, stdout = page
    _, info = db
    assert stdout.startswith(f"wrote {out} (")
    assert "4 pair/probe/variant plot(s)" in stdout and "1 fingerprint change(s), 1 open alert(s)" in stdout
    doc = out.read_text(encoding="utf-8")
    p = parse(doc)
    assert p.h2 == [
        "Summary",
        "Version changes",
        "Divergence (max_abs) and latency over time",
        "Throughput on the serving side",
        "Open alerts",
        "Each stack on its own (invariants, NaN/Inf hazards)",
        "NPU telemetry",
        "Latest fingerprints",
    ]
    assert p.h3 == HEADINGS
    # one plot per pair/probe/variant and one per served one, each an embedded PNG that decodes
    assert len(p.imgs) == PLOTS == 7
    for img in p.imgs:
        png = decode_png(img["src"])
        served = img["alt"].startswith("throughput of ")
        assert png.size[0] >= 900 and png.size[1] >= (200 if served else 500)
        assert len(np.unique(np.asarray(png.convert("RGB")).reshape(-1, 3), axis=0)) > 20  # not blank
        assert served or img["alt"].startswith("max_abs and p50 latency of ")
    assert sum(img["alt"].startswith("throughput of ") for img in p.imgs) == len(SERVED)
    # nothing is fetched from elsewhere, nothing runs
    assert p.scripts == 0 and p.links == []
    assert "http://" not in doc.replace("http://www.w3.org", "") and "https://" not in doc
    assert 'src="' not in doc.replace('src="data:image/png;base64,', "")


def test_report_tables(page, db):
    out, _ = page
    _, info = db
    p = parse(out.read_text(encoding="utf-8"))
    # pair, probe, variant, latest, then a count per status (consistent, unchecked, drift,
    # unsupported, incompatible, error), latest max_abs, p50 x 2, in PPO terms, first divergent
    summary = {r[0]: r for r in p.rows if r and r[0] in PAIRS and len(r) == 15}
    assert set(summary) == set(PAIRS)
    assert summary[DRIFTING_PAIR][3].startswith("drift") and int(summary[DRIFTING_PAIR][6]) > 50
    incompatible = summary["ms210->lite20"]
    assert incompatible[3].startswith("incompatible")
    assert incompatible[4] == "0" and int(incompatible[8]) > 150
    assert incompatible[10] == "-" and incompatible[11].endswith("ms") and incompatible[12] == "-"
    assert summary["ms210->ms210-graph"][10] == "0"  # bitwise-equal pair: latest max_abs 0
    assert all(r[13] == "" for r in summary.values())  # no importance ratios in this history
    assert all(r[14] == "" for r in summary.values())  # and no localized drift
    with sqlite3.connect(db[0]) as c:
        q = "SELECT count(*) FROM probe_results WHERE pair = 'ms20->ms210-graph'"
        stored = c.execute(q).fetchone()[0]
    assert sum(int(summary["ms20->ms210-graph"][i]) for i in range(4, 10)) == stored
    # version changes: the upgrade, with what changed
    change = next(r for r in p.rows if len(r) == 5 and r[2] == UPGRADED_STACK)
    assert change[0] == f"{info.upgrade_at:%Y-%m-%d %H:%M}" and change[1] == str(info.upgrade_run_id)
    assert change[4] == f"mindspore-lite 2.0.0 -> {UPGRADED_VERSION}"  # in the drift rule's words
    # the plots of the pairs with lite20 name the change; the others do not
    captions = dict(zip(p.h3, p.captions, strict=True))
    for pair in PAIRS:
        marked = (
            "fingerprint changes: lite20: mindspore-lite 2.0.0 -> 2.0.1"
            in captions[f"{pair} · ppo_policy [fp32]"]
        )
        assert marked == ("lite20" in pair), pair
    # open alerts only
    alert = next(r for r in p.rows if len(r) == 6 and r[2] == DRIFTING_PAIR)
    assert alert[0] == "warning" and "<since the upgrade>" in alert[3]
    assert not any("a resolved alert is not shown" in c for r in p.rows for c in r)
    # latest fingerprints side by side: one column per stack, differing values marked
    version_row = next(i for i, r in enumerate(p.rows) if r and r[0] == "runtime.runtime_version")
    assert p.rows[version_row][1:] == ["2.0.0", "2.10.0", UPGRADED_VERSION, "2.10.0"]
    assert p.row_classes[version_row] == "differs"
    kernel_row = next(i for i, r in enumerate(p.rows) if r and r[0] == "host.kernel")
    assert p.row_classes[kernel_row] == ""


def test_report_window_and_filters(db, tmp_path):
    path, info = db
    out = tmp_path / "r.html"
    code, stdout, _ = report(
        path,
        out,
        "--pair",
        DRIFTING_PAIR,
        "--since",
        (info.upgrade_at + timedelta(hours=1)).isoformat(),
        "--metric",
        "mean_abs",
    )
    assert code == 0
    assert "1 pair/probe/variant plot(s)" in stdout and "0 fingerprint change(s)" in stdout
    p = parse(out.read_text())
    assert p.h3 == [
        f"{DRIFTING_PAIR} · ppo_policy [fp32]",
        f"{DRIFTING_PAIR} · ppo_policy [fp32] · throughput",
    ]
    assert len(p.imgs) == 2
    assert "Divergence (mean_abs) and latency over time" in p.h2
    assert any("No stack changed its fingerprint in this window." in c for c in [out.read_text()])


def test_report_escapes_everything(db, tmp_path):
    src, _ = db
    path = tmp_path / "evil.db"
    shutil.copy(src, path)
    store = Store(f"sqlite:///{path}")
    with store.engine.begin() as conn:
        conn.execute(
            text("UPDATE probe_results SET pair = '<script>alert(1)</script>' WHERE pair = 'ms20->lite20'")
        )
        conn.execute(text("UPDATE alerts SET subject = '<img src=x onerror=alert(2)>'"))
        conn.execute(text("UPDATE stacks SET host = 'a&b\"<i>'"))
    store.close()
    out = tmp_path / "r.html"
    code, _, err = report(path, out)
    assert code == 0, err
    doc = out.read_text()
    assert "<script>" not in doc and "<img src=x" not in doc and "<i>" not in doc
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in doc and "&lt;img src=x onerror=alert(2)&gt;" in doc
    assert "a&amp;b&quot;&lt;i&gt;" in doc
    assert len(parse(doc).imgs) == PLOTS


def test_report_without_alert_data(history_db):
    store = Store.open(f"sqlite:///{history_db}")
    generate_history(store.engine, 10, start=START)
    with store.engine.begin() as conn:  # a database whose schema has no alert engine's tables
        conn.execute(text("DROP TABLE alert_deliveries"))
        conn.execute(text("DROP TABLE alerts"))
    store.close()
    from auditor.history.filters import Filters
    from auditor.report.html import render_report

    store = Store(f"sqlite:///{history_db}")
    with store.engine.connect() as conn:
        html_text, summary = render_report(conn, Filters(limit=None))
    store.close()
    assert "no alert data" in summary
    assert "no alert data: the database has no alerts table" in html_text


def test_report_errors(tmp_path, db, history_db):
    code, _, err = report(tmp_path / "missing.db", tmp_path / "r.html")
    assert code == 2 and "no history database at" in err and not (tmp_path / "missing.db").exists()
    code, _, err = report(history_db, tmp_path / "r.html")  # an empty, up-to-date history
    assert code == 2 and "no runs yet" in err and not (tmp_path / "r.html").exists()
    path, _ = db
    code, _, err = report(path, tmp_path / "r.html", "--metric", "max_abz")
    assert code == 2 and "no metric 'max_abz'" in err and "max_abs" in err
    code, _, err = report(path, tmp_path / "r.html", "--since", "2026-05-01", "--until", "2026-04-01")
    assert code == 2 and "empty window" in err
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, _, err = report(path, blocker / "r.html")
    assert code == 2 and f"--out {blocker / 'r.html'}: no such directory {blocker}" in err
    # #54: a missing directory is said before any work, and none is made for it
    code, _, err = report(path, tmp_path / "nosuch" / "deeper" / "r.html")
    assert code == 2 and f"no such directory {tmp_path / 'nosuch' / 'deeper'}" in err
    assert not (tmp_path / "nosuch").exists()
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro" / "r.html").mkdir()  # a directory where the file goes: the write fails
    code, _, err = report(path, tmp_path / "ro" / "r.html")
    assert code == 2 and "cannot write the report" in err


# -- rendered by Chromium --------------------------------------------------------------------------------


def chromium() -> str:
    def missing() -> str | None:
        if any(shutil.which(n) for n in CHROMIUMS):
            return None
        return (
            "headless Chromium is not installed (scripts/setup installs Debian's `chromium` where it "
            "runs as root with apt-get)"
        )

    require("chromium", missing)
    return next(found for n in CHROMIUMS if (found := shutil.which(n)))


CHROMIUMS = ("chromium", "chromium-browser", "google-chrome")


def run_chromium(tmp_path, *args: str) -> subprocess.CompletedProcess[bytes]:
    cmd = [
        chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, timeout=180)


def near(pixels: np.ndarray, hex_color: str, tol: int = 12) -> int:
    rgb = np.array([int(hex_color[i : i + 2], 16) for i in (1, 3, 5)])
    return int((np.abs(pixels.astype(int) - rgb).max(axis=-1) <= tol).sum())


def test_chromium_renders_the_plots(page, tmp_path):
    from auditor.report.html import CHANGE_COLOR, OUTPUT_COLORS, SIDE_COLORS

    out, _ = page
    url = out.resolve().as_uri()
    dom = run_chromium(tmp_path, "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr.decode(errors="replace")[-2000:]
    p = parse(dom.stdout.decode())
    assert len(p.imgs) == PLOTS and all(decode_png(i["src"]).size[0] >= 900 for i in p.imgs)
    assert p.h3 == HEADINGS

    shot = tmp_path / "shot.png"
    r = run_chromium(tmp_path, f"--screenshot={shot}", "--window-size=1280,4200", url)
    assert r.returncode == 0 and shot.is_file(), r.stderr.decode(errors="replace")[-2000:]
    pixels = np.asarray(Image.open(shot).convert("RGB"))
    assert pixels.shape[:2] == (4200, 1280)
    colors = len(np.unique(pixels.reshape(-1, 3), axis=0))
    assert colors > 2000, "the screenshot has too few colours for a page with plots"
    # Colours that only the plots use: the second output's line, the infer-latency line and the
    # dashed fingerprint-change line (which the page's text does not use at this size).
    assert near(pixels, OUTPUT_COLORS[1]) > 2000
    assert near(pixels, SIDE_COLORS["infer"]) > 2000
    # The plots sit below the tables: nothing of them in the header band.
    assert near(pixels[:150], OUTPUT_COLORS[1]) == 0
    # The dashed change lines, counted in the band of the plots (the tables above use the same
    # red for status text).
    rows = np.nonzero((np.abs(pixels.astype(int) - [0xE3, 0x77, 0xC2]).max(axis=-1) <= 12).any(axis=1))[0]
    band = pixels[max(0, rows.min() - 150) : rows.max() + 150]
    assert near(band, CHANGE_COLOR) > 300


# -- from 3 runs to 10,000: the axis fits the data, drawing is thinned, tables are not -------------------

# Injected before the page's own content: records console errors and uncaught exceptions, and
# once the page has loaded, whether each image decoded, into the DOM that --dump-dom prints.
PROBE_SCRIPT = """<script>
window.__errors = [];
window.addEventListener("error", function (e) { window.__errors.push("error: " + e.message); }, true);
var __origError = console.error;
console.error = function () { window.__errors.push("console: " + Array.from(arguments).join(" ")); };
window.addEventListener("load", function () {
  var imgs = Array.from(document.images);
  var out = document.createElement("pre");
  out.id = "browser-check";
  out.textContent = JSON.stringify({
    images: imgs.map(function (i) { return [i.complete, i.naturalWidth, i.naturalHeight]; }),
    errors: window.__errors
  });
  document.body.appendChild(out);
});
</script>"""


def browser_check(page_path, tmp_path) -> dict:
    """Load the page in headless Chromium; the images' decoded sizes and the console errors."""
    import json
    import re

    html_text = page_path.read_text(encoding="utf-8")
    probe = tmp_path / "checked.html"
    probe.write_text(html_text.replace("<head>", "<head>" + PROBE_SCRIPT, 1), encoding="utf-8")
    flags = ("--enable-logging=stderr", "--v=0", "--virtual-time-budget=10000", "--dump-dom")
    r = run_chromium(tmp_path, *flags, probe.as_uri())
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-2000:]
    found = re.search(r'<pre id="browser-check">(.*?)</pre>', r.stdout.decode())
    assert found, "the check script did not run: " + r.stdout.decode()[-500:]
    result = json.loads(html_module.unescape(found.group(1)))
    logged = [
        line
        for line in r.stderr.decode(errors="replace").splitlines()
        if "CONSOLE" in line and ("Uncaught" in line or "error" in line.lower())
    ]
    result["logged"] = logged
    return result


def scale_db(path, runs: int, interval: timedelta):
    store = Store.open(f"sqlite:///{path}")
    info = generate_history(store.engine, runs, start=START, interval=interval, variants=("fp32",))
    store.close()
    return path, info


@pytest.mark.parametrize(("runs", "interval"), [(3, timedelta(minutes=20)), (10_000, timedelta(minutes=1))])
def test_plots_from_3_to_10000_runs_load_and_decode_in_chromium(tmp_path, history_db, runs, interval):
    from auditor.report.html import MAX_DRAWN

    path, info = scale_db(history_db, runs, interval)
    out = tmp_path / "report.html"
    code, stdout, stderr = report(path, out)
    assert code == 0, stderr
    checked = browser_check(out, tmp_path)
    assert checked["errors"] == [] and checked["logged"] == []
    assert len(checked["images"]) == PLOTS
    assert all(done and w >= 900 and h > 200 for done, w, h in checked["images"]), checked["images"]
    # the summary counts every run with results, whatever the drawing shows
    with sqlite3.connect(path) as c:
        with_results = c.execute("SELECT count(DISTINCT run_id) FROM probe_results").fetchone()[0]
    assert f" {with_results} run(s) " in stdout and with_results > 0.9 * runs
    assert len(info.run_ids) == runs and (runs < MAX_DRAWN or with_results > MAX_DRAWN)


def test_the_time_axis_fits_the_runs():
    from auditor.report.html import MIN_SPAN, fitted_axis

    since, until = datetime(2026, 1, 1), datetime(2026, 1, 31)
    a, b = datetime(2026, 1, 28, 12), datetime(2026, 1, 30, 12)
    lo, hi = fitted_axis([a, datetime(2026, 1, 29), b], since, until)
    assert a - timedelta(hours=2) < lo < a and b < hi < b + timedelta(hours=2)
    lo, hi = fitted_axis([a, a + timedelta(minutes=2)], since, until)  # three runs in minutes
    assert hi - lo >= MIN_SPAN and lo < a < a + timedelta(minutes=2) < hi
    assert fitted_axis([], since, until) == (since, until)


def test_thinning_keeps_every_extreme_and_the_order():
    import math

    from auditor.report.html import thin

    xs = [datetime(2026, 1, 1) + timedelta(minutes=i) for i in range(10_000)]
    ys = [math.sin(i / 50) for i in range(10_000)]
    ys[1234], ys[8765] = 50.0, -50.0  # spikes
    ys[4000:4100] = [math.nan] * 100
    tx, ty = thin(xs, ys, 1000)
    assert len(tx) <= 1000 and tx == sorted(tx)
    finite = [y for y in ty if math.isfinite(y)]
    assert max(finite) == 50.0 and min(finite) == -50.0
    assert thin(xs[:10], ys[:10], 1000) == (xs[:10], ys[:10])


@pytest.mark.faults
def test_per_side_findings_stand_per_stack_probe_and_variant(tmp_path, history_template):
    """A run narrowed to one pair (``audit --model``, ``--pair``) speaks for what it ran only:
    the page keeps each other stack's per-side findings from the latest run that audited it."""
    path = tmp_path / "history.db"
    shutil.copyfile(history_template, path)
    store = Store.open(f"sqlite:///{path}")
    info = generate_history(store.engine, 3, start=START, upgrade_at=None, error_rate=0, abort_rate=0)
    first, full, narrowed = info.run_ids
    R, P, S = m.Run, m.ProbeResultRow, m.Stack
    with store.engine.begin() as conn:
        assert {r.status for r in conn.execute(select(R.status))} == {"complete"}
        ids = dict(conn.execute(select(S.name, S.id)).all())
        # the last run audited ms20 -> ms210-graph only
        conn.execute(
            delete(P).where(
                P.run_id == narrowed,
                (P.train_stack_id != ids["ms20"]) | (P.infer_stack_id != ids["ms210-graph"]),
            )
        )

        def finding(run_id, kind, subject, message, **details):
            conn.execute(
                insert(m.FindingRow).values(
                    run_id=run_id,
                    kind=kind,
                    severity="error",
                    subject=subject,
                    key=message,
                    message=message,
                    details={"probe": "ppo_policy", "variant": "fp32", **details},
                )
            )

        finding(first, "invariant", "lite20", "OLD-LITE20", stack="lite20")  # run 2 covered it again
        finding(full, "invariant", "lite20", "KEPT-LITE20", stack="lite20")
        finding(full, "invariant", "ms210-graph", "GONE-MS210-GRAPH", stack="ms210-graph")  # run 3: clean
        where = [{"subject": s, "variant": "fp32", "message": ""} for s in ("ms20", "lite20")]
        finding(full, "nan-hazard", "ppo_policy", "KEPT-MERGED", stack="ms20", where=where)
        finding(narrowed, "nan-hazard", "ms20", "NEW-MS20", stack="ms20")
    with store.engine.connect() as conn:
        side = side_findings(conn, START, START + timedelta(days=1))
    store.close()
    assert [(f["message"], f["run_id"], f["stacks"]) for f in side] == [
        ("NEW-MS20", narrowed, "ms20"),
        ("KEPT-LITE20", full, "lite20"),
        ("KEPT-MERGED", full, "lite20"),  # its subject is its probe; the stack it still speaks for
    ]


def test_summary_says_the_latest_importance_ratios_in_ppo_terms(tmp_path, history_template):
    """A stored cycle with importance-ratio checks: the summary row of each policy variant says
    what the stacks' difference does to a PPO update in the live report's words (the latest
    run's clip share and ESS, from its stored figures: auditor.report.summary.ppo_sentence)."""
    path = tmp_path / "h.db"
    shutil.copyfile(history_template, path)
    store = Store.open(f"sqlite:///{path}")
    run_id = store.begin_run("test")
    store.finish_run(run_id, failing_cycle(), {})
    store.close()
    out = tmp_path / "report.html"
    code, _, stderr = report(path, out, "--since", "2000-01-01")
    assert code == 0, stderr
    rows = [r for r in parse(out.read_text(encoding="utf-8")).rows if len(r) == 15]
    ppo = {(r[0], r[1], r[2]): r[13] for r in rows}
    said = ppo[("ms20->lite20", "ppo_policy", "fp16")]
    assert said.startswith("the stacks alone would clip 100.00% at epsilon 0.2 (0 expected)")
    assert "ESS 0.0000" in said
    assert ppo[("ms20->lite20", "ppo_policy", "fp32")] == ""
