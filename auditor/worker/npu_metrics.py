"""The NPU telemetry vocabulary, shared by both processes: the telemetry collector in a
stack's worker (``plugins/collectors/npu_telemetry.py``) names what it reads with it, the
auditor validates ``[telemetry]`` thresholds, stores series, exports Prometheus gauges and
draws plots with it. One list, so a metric cannot be spelled two ways.

Each metric comes from one or more ``npu-smi info -t <view> -i <npu>`` keys (the key differs
by product and release: ``NPU Temperature (C)`` on servers, ``Temperature (C)`` on cards,
``Temperature(C)`` in ``-t common``; formats and their sources in tests/ascend_fixtures/
telemetry/SOURCES.md). Utilisations and usage rates are integer percentages as npu-smi prints
them; ECC counts are the device's running totals.

Python 3.7: runs inside stacks too.
"""

VIEWS = ("power", "temp", "usages", "ecc", "health", "memory")
"""The ``-t`` views the collector can query, one ``npu-smi`` call per NPU each."""

DEFAULT_VIEWS = ("power", "temp", "usages", "ecc", "health")
"""What a sample reads unless ``[telemetry] views`` says otherwise (``memory`` adds the HBM
temperature, at the cost of one more call per NPU)."""

HEALTH_CODES = {"OK": 0, "Warning": 1, "Alarm": 2, "Critical": 3}
"""npu-smi's health words as a number that grows with the trouble (UNKNOWN and ``NA``, as
printed in a vNPU container, are not recorded)."""

# metric -> (unit, Prometheus gauge name, what it is)
METRICS = {
    "power_w": ("W", "auditor_npu_power_watts", "real-time power"),
    "temperature_c": ("°C", "auditor_npu_temperature_celsius", "chip temperature"),
    "hbm_temperature_c": ("°C", "auditor_npu_hbm_temperature_celsius", "HBM temperature"),
    "aicore_pct": ("%", "auditor_npu_aicore_utilization_percent", "AI Core utilisation"),
    "aicpu_pct": ("%", "auditor_npu_aicpu_utilization_percent", "AI CPU utilisation"),
    "aivector_pct": ("%", "auditor_npu_aivector_utilization_percent", "AI Vector utilisation"),
    "ctrlcpu_pct": ("%", "auditor_npu_ctrlcpu_utilization_percent", "control CPU utilisation"),
    "npu_util_pct": ("%", "auditor_npu_utilization_percent", "NPU utilisation (npu-smi 25.5 and later)"),
    "hbm_usage_pct": ("%", "auditor_npu_hbm_usage_percent", "HBM in use"),
    "hbm_capacity_mb": ("MB", "auditor_npu_hbm_capacity_megabytes", "HBM capacity"),
    "hbm_bandwidth_pct": ("%", "auditor_npu_hbm_bandwidth_percent", "HBM bandwidth in use"),
    "memory_usage_pct": ("%", "auditor_npu_memory_usage_percent", "DDR memory in use (cards with DDR only)"),
    "memory_capacity_mb": ("MB", "auditor_npu_memory_capacity_megabytes", "DDR memory capacity"),
    "memory_bandwidth_pct": ("%", "auditor_npu_memory_bandwidth_percent", "DDR bandwidth in use"),
    "ecc_hbm_single_bit": ("errors", "auditor_npu_ecc_hbm_single_bit_errors", "HBM single-bit ECC errors"),
    "ecc_hbm_double_bit": ("errors", "auditor_npu_ecc_hbm_double_bit_errors", "HBM double-bit ECC errors"),
    "ecc_ddr_single_bit": ("errors", "auditor_npu_ecc_ddr_single_bit_errors", "DDR single-bit ECC errors"),
    "ecc_ddr_double_bit": ("errors", "auditor_npu_ecc_ddr_double_bit_errors", "DDR double-bit ECC errors"),
    "ecc_isolated_pages": ("pages", "auditor_npu_ecc_isolated_pages", "memory pages isolated for ECC errors"),
    "health": ("", "auditor_npu_health", "health"),
}

# npu-smi key -> metric. Keys not listed are not recorded.
KEYS = {
    "NPU Real-time Power(W)": "power_w",
    "Power Dissipation(W)": "power_w",
    "NPU Temperature (C)": "temperature_c",
    "Temperature (C)": "temperature_c",
    "Temperature(C)": "temperature_c",
    "HBM Temperature(C)": "hbm_temperature_c",
    "Aicore Usage Rate(%)": "aicore_pct",
    "Aicpu Usage Rate(%)": "aicpu_pct",
    "Aivector Usage Rate(%)": "aivector_pct",
    "Vectorcore Usage Rate(%)": "aivector_pct",
    "Ctrlcpu Usage Rate(%)": "ctrlcpu_pct",
    "NPU Utilization(%)": "npu_util_pct",
    "HBM Usage Rate(%)": "hbm_usage_pct",
    "HBM Capacity(MB)": "hbm_capacity_mb",
    "HBM Bandwidth Usage Rate(%)": "hbm_bandwidth_pct",
    "DDR Usage Rate(%)": "memory_usage_pct",
    "Memory Usage Rate(%)": "memory_usage_pct",
    "DDR Capacity(MB)": "memory_capacity_mb",
    "Memory Capacity(MB)": "memory_capacity_mb",
    "DDR Bandwidth Usage Rate(%)": "memory_bandwidth_pct",
    "Memory Bandwidth Usage Rate(%)": "memory_bandwidth_pct",
    "HBM Single Bit Error Count": "ecc_hbm_single_bit",
    "HBM Double Bit Error Count": "ecc_hbm_double_bit",
    "DDR Single Bit Error Count": "ecc_ddr_single_bit",
    "DDR Double Bit Error Count": "ecc_ddr_double_bit",
    "Single-bit Error Count": "ecc_ddr_single_bit",
    "Double-bit Error Count": "ecc_ddr_double_bit",
    "HBM Single Bit Isolated Pages Count": "ecc_isolated_pages",
    "HBM Double Bit Isolated Pages Count": "ecc_isolated_pages",
    "DDR Single Bit Isolated Pages Count": "ecc_isolated_pages",
    "DDR Double Bit Isolated Pages Count": "ecc_isolated_pages",
    "Health Status": "health",
    "Health": "health",
}

SUMMED = ("ecc_isolated_pages",)
"""Metrics that several keys of one chip add up to (isolated pages of each kind)."""


HEALTH_LEGEND = "0 OK, 1 Warning, 2 Alarm, 3 Critical"


def unit(metric):
    return METRICS[metric][0] if metric in METRICS else ""
