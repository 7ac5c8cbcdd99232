"""Each format's reader on real output formats (hand-written fixtures for nvidia-smi and
dcgmi dmon, cuts of the real traces for CSV and gpu-burn; see tests/fixtures/import/README.md)."""

import csv

import numpy as np
import pytest

from soak.importers import csv as csv_import
from soak.importers import dcgmi, gpu_burn, nvidia_smi
from soak.importers.source import ImportFailed

NOUNITS_QUERY = ["index", "temperature.gpu", "utilization.gpu", "power.draw"]


def test_nvidia_smi_header_with_units_na_and_reason_bits(fixture_path):
    trace = nvidia_smi.read(fixture_path("nvidia-smi-units.csv"), None, 1.0)
    gpu0, gpu1 = trace.devices[0], trace.devices[1]
    assert gpu0.values["util_pct"] == [0.0, 100.0, 100.0]
    assert gpu0.values["power_w"] == [71.23, 652.10, 688.95]
    assert gpu0.values["sm_clock_mhz"] == [345.0, 1980.0, 1755.0]
    assert gpu0.values["clock_reasons"] == [1.0, 0.0, 4.0]  # hex bitmask, SW power cap = 4
    assert gpu0.values["fan_pct"] == [None, None, None]  # [N/A] is unreadable, not 0
    assert gpu1.values["mem_temp_c"] == [None, None, None]
    assert gpu0.t[0] == 0.0 and gpu0.t[2] == pytest.approx(2.012, abs=1e-3)
    assert trace.names[0] == "NVIDIA H100 80GB HBM3"
    assert trace.uuids[1] == "GPU-9b8c7d6e-5f4a-4b3c-9d2e-1f0a9b8c7d6e"
    assert trace.epoch_s is not None and "timestamp" in trace.time_basis


def test_nvidia_smi_nounits_header_and_not_supported(fixture_path):
    trace = nvidia_smi.read(fixture_path("nvidia-smi-nounits.csv"), None, 2.0)
    assert trace.devices[0].values["fan_pct"] == [30.0, None]  # [Not Supported]
    assert trace.devices[1].values["power_w"] == [22.10, 245.30]
    assert trace.devices[0].t == [0.0, 2.0]  # no timestamp: samples × --interval
    assert "--interval" in trace.time_basis


def test_nvidia_smi_noheader_needs_the_query(fixture_path):
    path = fixture_path("nvidia-smi-noheader-nounits.csv")
    with pytest.raises(ImportFailed, match=r":1: no header line: give the fields with --query"):
        nvidia_smi.read(path, None, 1.0)
    trace = nvidia_smi.read(path, NOUNITS_QUERY, 0.3)
    assert trace.devices[1].values["temp_c"] == [42.0, 42.0, 44.0]
    assert trace.devices[0].t == pytest.approx([0.0, 0.3, 0.6])


def test_nvidia_smi_noheader_with_units(fixture_path):
    query = nvidia_smi.parse_query(
        "timestamp,index,temperature.gpu,utilization.gpu,power.draw,clocks.sm"
    )
    trace = nvidia_smi.read(fixture_path("nvidia-smi-noheader-units.csv"), query, 1.0)
    assert trace.devices[0].values["power_w"] == [112.40, 298.55, None]
    assert trace.devices[0].t == pytest.approx([0.0, 5.003, 10.005], abs=1e-3)


def test_nvidia_smi_value_unit_must_match_the_header(tmp_path):
    path = tmp_path / "smi.csv"
    path.write_text("index, power.draw [W]\n0, 70.1 W\n0, 650 MHz\n")
    with pytest.raises(ImportFailed, match=r"smi\.csv:3: column 'power.draw': mixed units"):
        nvidia_smi.read(path, None, 1.0)


def test_dcgmi_dmon_columns_and_na(fixture_path):
    trace = dcgmi.read(fixture_path("dcgmi-dmon.txt"), 1.0)
    assert trace.devices[0].values["temp_c"] == [33.0, 41.0, 48.0]
    assert trace.devices[1].values["temp_c"] == [35.0, 44.0, None]
    assert trace.devices[1].values["power_w"] == [63.112, 612.904, 691.004]
    assert trace.devices[0].values["util_pct"] == [0.0, 100.0, 100.0]
    assert trace.devices[0].t == [0.0, 1.0, 2.0]


def _derived(fixture_path):
    with open(fixture_path("v100-39-parsed-head.csv")) as f:
        return list(csv.DictReader(f))


def test_gpu_burn_rebuilds_time_as_the_derived_csv_does(fixture_path):
    """The raw log's rebuilt clock matches the derived CSV's elapsed column (both cut from
    the same 18 h trace) at every one of its rows."""
    trace = gpu_burn.read(fixture_path("v100-39-gpuburn-head.txt.gz"))
    rows = _derived(fixture_path)
    ours = np.array(trace.devices[0].t[: len(rows)])
    theirs = np.array([float(r["est_elapsed_s_from_gpu0"]) for r in rows])
    assert np.max(np.abs(ours - theirs)) < 0.05
    temps = [float(r["gpu2_temp_c"]) for r in rows]
    assert trace.devices[2].values["temp_c"][: len(rows)] == temps
    assert "rebuilt from gpu-burn's counters" in trace.time_basis


def test_gpu_burn_work_is_procd_times_ops(fixture_path):
    trace = gpu_burn.read(fixture_path("v100-39-gpuburn-head.txt.gz"))
    gpu1 = trace.devices[1]
    k = next(i for i, r in enumerate(gpu1.rate) if r is not None and gpu1.t[i] > 10)
    # rate × interval = 1347 multiplies × OPS_PER_MUL
    assert gpu1.rate[k] * gpu1.rate_interval[k] == pytest.approx(1347 * 17_188_257_792)


def test_csv_wide_with_device_placeholder(fixture_path):
    options = csv_import.CsvOptions(
        time_col="est_elapsed_s_from_gpu0",
        time_unit="s",
        devices=4,
        mapping={"temp_c": "gpu{i}_temp_c", "throughput": "gpu{i}_gflops"},
        throughput_unit="GFLOP/s",
    )
    trace = csv_import.read(fixture_path("v100-39-parsed-head.csv"), options)
    assert sorted(trace.devices) == [0, 1, 2, 3]
    assert trace.devices[3].values["temp_c"][:2] == [33.0, 41.0]
    assert trace.devices[0].rate[1] == 12853e9  # GFLOP/s → FLOP/s
    assert trace.work_unit == "FLOP"


def test_csv_long_iso_gz(fixture_path):
    options = csv_import.CsvOptions(
        time_col="timestamp",
        time_unit="iso",
        device_col="gpu_index",
        mapping={"temp_c": "temperature_C", "util_pct": "utilization_gpu_percent"},
    )
    trace = csv_import.read(fixture_path("h100-f4f827dd-from-idle-head.csv.gz"), options)
    assert sorted(trace.devices) == list(range(8))
    assert trace.devices[1].values["temp_c"][0] == 42.0  # the GPU hot at idle
    assert trace.devices[0].t[1] == pytest.approx(0.3, abs=0.1)


def test_csv_b200_step_with_tflops(fixture_path):
    options = csv_import.CsvOptions(
        time_col="elapsed_seconds",
        time_unit="s",
        device_col="gpu_id",
        mapping={"temp_c": "gpu_temp_c", "power_w": "gpu_power_w", "throughput": "gpu_tflops"},
        throughput_unit="TFLOP/s",
    )
    trace = csv_import.read(fixture_path("b200-0108-pl1000w.csv"), options)
    assert sorted(trace.devices) == list(range(8))
    assert max(r for r in trace.devices[2].rate if r) > 1e12


STATUS = (
    "{pct}%  proc'd: {n} (12853 Gflop/s) - {n} (12805 Gflop/s)   errors: 0 - 0   "
    "temps: 39 C - 37 C "
)
BAD_TOOL_FILES = {
    "gpu-burn empty": ("gpu-burn", "", ":1: no gpu-burn status record"),
    "gpu-burn truncated last record": (
        "gpu-burn",
        "\r".join([STATUS.format(pct=0.0, n=1347), STATUS.format(pct=0.0, n=2694)])
        + "\r0.1%  proc'd: 4041 (128",
        ":3: truncated last record",
    ),
    "gpu-burn counter backwards": (
        "gpu-burn",
        "\r".join([STATUS.format(pct=0.0, n=2694), STATUS.format(pct=0.0, n=1347)]) + "\r",
        ":2: a proc'd counter goes backwards",
    ),
    "nvidia-smi duplicated row": (
        "nvidia-smi",
        "timestamp, index, temperature.gpu\n2024/03/11 14:02:11.123, 0, 34\n"
        "2024/03/11 14:02:11.123, 0, 34\n",
        ":3: device 0 appears twice at the same time",
    ),
    "nvidia-smi truncated last line": (
        "nvidia-smi",
        "index, temperature.gpu, power.draw [W]\n0, 34, 70.1 W\n0, 35",
        ":3: truncated last line (2 of 3 fields)",
    ),
    "nvidia-smi no device column, two rows at one time": (
        "nvidia-smi",
        "timestamp, temperature.gpu, power.draw [W]\n2024/03/11 14:02:11.123, 34, 70.1 W\n"
        "2024/03/11 14:02:12.123, 34, 70.1 W\n2024/03/11 14:02:12.123, 36, 71.0 W\n",
        ":4: no device column, so read as one device, but time 2024/03/11 14:02:12.123 has two "
        "rows: add index to --query-gpu to tell the GPUs apart",
    ),
    "dcgmi data before header": ("dcgmi-dmon", "GPU 0  33  61.3\n", ":1: data before the"),
    "dcgmi truncated last line": (
        "dcgmi-dmon",
        "#Entity   TMPTR  POWER\nID\nGPU 0     33     61.347\nGPU 1     35",
        ":4: truncated last line (1 of 2 values)",
    ),
}


@pytest.mark.parametrize("fmt,content,message", BAD_TOOL_FILES.values(), ids=BAD_TOOL_FILES.keys())
def test_bad_tool_logs_name_file_and_line(fmt, content, message, tmp_path):
    path = tmp_path / "log.txt"
    path.write_text(content)
    read = {
        "gpu-burn": gpu_burn.read,
        "nvidia-smi": lambda p: nvidia_smi.read(p, None, 1.0),
        "dcgmi-dmon": lambda p: dcgmi.read(p, 1.0),
    }[fmt]
    with pytest.raises(ImportFailed) as caught:
        read(path)
    assert str(caught.value).startswith(str(path) + ":") and message in str(caught.value)


def test_csv_header_with_a_byte_order_mark(tmp_path):
    path = tmp_path / "excel.csv"
    path.write_bytes("\ufefft,gpu,temp\n0,0,30\n1,0,31\n".encode())
    options = csv_import.CsvOptions(
        time_col="t", time_unit="s", device_col="gpu", mapping={"temp_c": "temp"}
    )
    assert csv_import.read(path, options).devices[0].values["temp_c"] == [30.0, 31.0]


def test_a_one_gpu_nvidia_smi_log_without_index_is_device_0(tmp_path):
    """The common workstation query: no index, uuid or bus id, one row per timestamp."""
    path = tmp_path / "one.csv"
    path.write_text(
        "timestamp, power.draw [W], temperature.gpu, clocks.current.sm [MHz], utilization.gpu [%]\n"
        "2024/03/11 14:02:11.000, 301.47 W, 61, 1980 MHz, 100 %\n"
        "2024/03/11 14:02:12.000, 302.10 W, 61, 1980 MHz, 100 %\n"
    )
    trace = nvidia_smi.read(path, None, 1.0)
    assert list(trace.devices) == [0]
    assert trace.devices[0].t == [0.0, 1.0]
    assert trace.devices[0].values["power_w"] == [301.47, 302.10]


def test_a_csv_without_a_device_column_is_one_device(tmp_path):
    path = tmp_path / "one.csv"
    path.write_text("t,temp\n0,40\n1,41\n")
    trace = csv_import.read(path, csv_import.CsvOptions("t", "s", {"temp_c": "temp"}))
    assert list(trace.devices) == [0] and trace.devices[0].values["temp_c"] == [40.0, 41.0]
    path.write_text("t,temp\n0,40\n1,41\n1,43\n")
    with pytest.raises(
        ImportFailed,
        match=r":4: no device column, so read as one device, "
        r"but time 1 has two rows: give --device-col COL",
    ):
        csv_import.read(path, csv_import.CsvOptions("t", "s", {"temp_c": "temp"}))


def test_csv_b200_inlet_column_is_the_servers_inlet_and_0_is_not_a_reading(fixture_path, tmp_path):
    options = csv_import.CsvOptions(
        time_col="elapsed_seconds",
        time_unit="s",
        device_col="gpu_id",
        mapping={"temp_c": "gpu_temp_c", "inlet_c": "inlet_temp_c"},
    )
    trace = csv_import.read(fixture_path("b200-0108-pl1000w.csv"), options)
    inlet = trace.server["inlet_c"]
    assert set(inlet.values()) == {24.0}  # the sweep's IPMI inlet, once per time
    assert len(inlet) == len(trace.devices[0].t)
    assert trace.server_columns == {"inlet_c": "inlet_temp_c"}
    early = tmp_path / "early.csv"  # the 0107 logs' BMC columns read 0.0 before their poll
    early.write_text("t,gpu,temp,inlet\n0,0,35,0.0\n0,1,36,0.0\n1,0,36,23.0\n1,1,37,23.0\n")
    options = csv_import.CsvOptions("t", "s", {"temp_c": "temp", "inlet_c": "inlet"}, "gpu")
    assert csv_import.read(early, options).server["inlet_c"] == {0.0: None, 1.0: 23.0}
