"""The NPU telemetry collector against fake npu-smi programs that print published outputs
(tests/npu_fakes.py, tests/ascend_fixtures/telemetry/), in this process, and once under a
real Python 3.7."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from auditor.plugins.collectors import npu_telemetry as telemetry

from auditor.stacks.launch import worker_packages
from auditor.worker.bootstrap import REGISTER
from auditor.worker.npu_metrics import KEYS, METRICS, VIEWS
from tests.npu_fakes import DCMI_8005, HOSTS, Card, Host, derive, fixture, host_910b_8, write_npu_smi
from tests.unit.worker.test_py37_compat import _python37

ALL_VIEWS = list(VIEWS)


def sample(tmp_path: Path, host: Host, views: list[str] | None = None, timeout: float = 10.0) -> dict:
    fake = write_npu_smi(tmp_path / "npu-smi", host)
    return telemetry.collect(
        {"npu_smi": str(fake), "timeout": timeout, "environ": dict(os.environ), "views": views or ALL_VIEWS}
    )


def values(doc: dict, npu: int, chip: str = "0") -> dict:
    (entry,) = [n for n in doc["npus"] if n["npu"] == npu]
    (found,) = [c["values"] for c in entry["chips"] if c["chip"] == chip]
    return found


def test_catalog_is_consistent() -> None:
    assert set(KEYS.values()) <= set(METRICS)
    names = [gauge for _, gauge, _ in METRICS.values()]
    assert len(names) == len(set(names)), "two metrics share a Prometheus name"
    assert all(n.startswith("auditor_npu_") for n in names)


def test_910b_host_idle_busy_and_failing_cards(tmp_path: Path) -> None:
    doc = sample(tmp_path, host_910b_8())
    assert doc["available"] and not doc["failed"] and doc["reason"] is None
    assert [n["npu"] for n in doc["npus"]] == list(range(8))
    idle = values(doc, 0)
    # the published 910B outputs (npu-smi 25.5.1): Chip ID after the block, MCU sensors skipped
    assert idle["power_w"] == 103.5 and idle["temperature_c"] == 39.0
    assert idle["hbm_usage_pct"] == 5.0 and idle["hbm_capacity_mb"] == 65536.0
    assert idle["aicore_pct"] == 0.0 and idle["aicpu_pct"] == 0.0 and idle["ctrlcpu_pct"] == 6.0
    assert idle["health"] == 0.0 and idle["ecc_hbm_double_bit"] == 0.0
    # DDR Capacity(MB) : 0 -> the 910B has no DDR: its 0 % would read as idle, so nothing is kept
    assert not any(k.startswith(("memory_", "ecc_ddr_")) for k in idle)
    busy = values(doc, 6)
    assert busy["temperature_c"] == 91.0 and busy["hbm_usage_pct"] == 93.0 and busy["aicore_pct"] == 87.0
    assert busy["ecc_hbm_double_bit"] == 2.0 and busy["health"] == 1.0 and busy["power_w"] == 312.4
    # the failing card: each view's failure is its own, with npu-smi's words; the others are read
    (failing,) = [n for n in doc["npus"] if n["npu"] == 7]
    assert failing["chips"] == [] and len(failing["errors"]) == len(ALL_VIEWS)
    assert all("exit status 187: dcmi module initialize failed. ret is -8005" in e for e in failing["errors"])
    assert "info -t power -i 7" in failing["errors"][0]
    assert all(not n["errors"] for n in doc["npus"] if n["npu"] != 7)
    # "memory" is not offered by this fake card: listed as unsupported, not as an error
    assert values(doc, 0) and [n["unsupported"] for n in doc["npus"]][0] == ["memory"]
    assert doc["calls"] == 1 + 8 * len(ALL_VIEWS)


def test_310b_soc_with_mcu_blocks(tmp_path: Path) -> None:
    doc = sample(tmp_path, HOSTS["310b"]())
    chip = values(doc, 0)
    assert chip["power_w"] == 9.1 and chip["temperature_c"] == 50.0 and chip["health"] == 0.0
    assert chip["memory_capacity_mb"] == 10810.0 and chip["memory_usage_pct"] == 35.0  # a 310B has DDR
    mcu = values(doc, 0, "mcu")
    assert mcu == {"power_w": 16.9, "health": 0.0}  # the MCU's own sensors (LM75, TEC: NA) are not chips'
    assert doc["npus"][0]["unsupported"] == ["ecc", "memory"]


def test_950_views_without_chip_ids(tmp_path: Path) -> None:
    doc = sample(tmp_path, HOSTS["950"]())
    chip = values(doc, 0)
    assert chip["power_w"] == 296.5 and chip["temperature_c"] == 53.0 and chip["hbm_temperature_c"] == 63.0
    assert chip["hbm_usage_pct"] == 3.0 and chip["npu_util_pct"] == 0.0 and chip["health"] == 0.0
    # the isolated-pages counts of every kind add up (all 0 here) and each count is read once
    assert chip["ecc_isolated_pages"] == 0.0 and chip["ecc_hbm_single_bit"] == 0.0


def test_duo_card_chips_named_after_their_block(tmp_path: Path) -> None:
    doc = sample(tmp_path, HOSTS["310p-duo"](), views=["usages"])
    assert values(doc, 1, "0")["memory_capacity_mb"] == 44280.0
    assert values(doc, 1, "1")["memory_capacity_mb"] == 43693.0
    assert values(doc, 1, "1")["ctrlcpu_pct"] == 3.0 and values(doc, 1, "1")["aivector_pct"] == 0.0


def test_tab_indented_output_reads_the_same(tmp_path: Path) -> None:
    """The tool prints a TAB where the documentation shows 8 spaces."""
    published = host_910b_8(busy=(), failing=())
    tabbed = Host(
        published.listing.replace("        ", "\t"),
        {
            n: Card({v: t.replace("        ", "\t") for v, t in c.views.items()})
            for n, c in published.cards.items()
        },
    )
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert sample(tmp_path / "a", published)["npus"] == sample(tmp_path / "b", tabbed)["npus"]


def test_values_npu_smi_does_not_know_are_left_out(tmp_path: Path) -> None:
    card = Card(
        {"temp": derive(fixture("910B/info_t_temp_25.5.1_IT21HMDC.txt"), {"NPU Temperature (C)": "NA"})}
    )
    card.views["power"] = derive(
        fixture("910B/info_t_power_25.5.1_IT21HMDC.txt"), {"NPU Real-time Power(W)": "-"}
    )
    card.views["health"] = derive(fixture("950/info_t_health.txt"), {"Health": "UNKNOWN"})
    card.views["usages"] = fixture("910B/info_t_usages_25.5.1_IT21HMDC.txt")
    doc = sample(tmp_path, Host(fixture("950/info_l.txt"), {0: card}))
    chip = values(doc, 0)
    assert "temperature_c" not in chip and "power_w" not in chip and "health" not in chip
    assert chip["hbm_usage_pct"] == 5.0


def test_host_without_npu_smi_or_cards(tmp_path: Path) -> None:
    doc = telemetry.collect({"npu_smi": str(tmp_path / "none"), "environ": {}, "timeout": 1})
    assert not doc["available"] and not doc["failed"] and doc["calls"] == 0
    assert doc["reason"] == f"{tmp_path / 'none'}: not found"
    assert "not found on PATH" in telemetry.collect({"environ": {"PATH": str(tmp_path)}})["reason"]
    doc = sample(tmp_path, HOSTS["no-card"]())
    assert not doc["available"] and not doc["failed"] and doc["npus"] == []
    assert doc["reason"].endswith("There is no NPU card on this server.") and doc["calls"] == 1


def test_npu_smi_that_cannot_list_is_a_failure_not_an_empty_host(tmp_path: Path) -> None:
    text, status = DCMI_8005
    doc = sample(tmp_path, Host(text, {}, listing_status=status))
    assert not doc["available"] and doc["failed"]
    assert "exit status 187: dcmi module initialize failed. ret is -8005" in doc["reason"]


def test_a_hanging_view_is_killed_and_nothing_more_is_asked(tmp_path: Path) -> None:
    host = host_910b_8(busy=(), failing=())
    fake = write_npu_smi(tmp_path / "npu-smi", host)
    script = fake.read_text().replace('"info -t temp -i 2")', '"info -t temp -i 2") sleep 30;')
    fake.write_text(script)
    doc = telemetry.collect({"npu_smi": str(fake), "timeout": 0.5, "environ": dict(os.environ)})
    npus = {n["npu"]: n for n in doc["npus"]}
    # NPUs 0-3 are read side by side: the others finish while NPU 2's temp call hangs
    assert all(not npus[n]["errors"] and values(doc, n)["power_w"] == 103.5 for n in (0, 1, 3))
    assert "timed out after 0.5 s" in npus[2]["errors"][0] and "info -t temp -i 2" in npus[2]["errors"][0]
    assert values(doc, 2)["power_w"] == 103.5  # read before the hang
    assert [e.split(":")[0] for e in npus[2]["errors"][1:]] == ["usages", "ecc", "health"]
    assert all("not asked: an earlier npu-smi call timed out" in e for e in npus[2]["errors"][1:])
    # the other NPUs were read while it hung, or are asked nothing more once it timed out
    for n in (4, 5, 6, 7):
        asked = [e for e in npus[n]["errors"] if "not asked" not in e]
        assert asked == [] and (npus[n]["chips"] or len(npus[n]["errors"]) == 5), npus[n]
    read = sum(1 for n in npus.values() if n["chips"] and n["npu"] != 2)
    assert doc["calls"] == 1 + read * 5 + 2  # the list, the NPUs read, power and temp of NPU 2


@pytest.mark.parametrize("host", ["910b-8", "310b", "950"])
def test_runs_under_python37(tmp_path: Path, host: str) -> None:
    python = _python37()
    fake = write_npu_smi(tmp_path / "npu-smi", HOSTS[host]())
    spec = {"packages": worker_packages()}
    code = REGISTER + (
        "from auditor.plugins.collectors import npu_telemetry as t\n"
        "ctx = {'npu_smi': sys.argv[2], 'environ': {}, 'timeout': 10, 'views': sys.argv[3].split(',')}\n"
        "print(json.dumps(t.collect(ctx)))\n"
    )
    out = subprocess.run(
        [str(python), "-c", code, json.dumps(spec), str(fake), ",".join(ALL_VIEWS)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    there = json.loads(out.stdout)
    assert there["available"] and there["npus"]
    assert there["npus"] == sample(tmp_path, HOSTS[host]())["npus"]
