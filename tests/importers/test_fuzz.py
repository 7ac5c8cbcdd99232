"""Property-based tests of the parsers: any bytes give a trace or one ImportFailed naming the
file, never another exception; values written in nvidia-smi's format read back exactly."""

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from soak.importers import csv as csv_import
from soak.importers import dcgmi, gpu_burn, nvidia_smi
from soak.importers.source import ImportFailed

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Bytes that look like traces: separators, digits, units, the tools' keywords.
TOKENS = st.sampled_from(
    [
        b",",
        b" ",
        b"\n",
        b"\r",
        b"\r\n",
        b"0",
        b"1",
        b"42",
        b"3.5",
        b"-",
        b"W",
        b" %",
        b"MHz",
        b"[N/A]",
        b"[Not Supported]",
        b"GPU",
        b"#Entity",
        b"ID",
        b"proc'd:",
        b"Gflop/s",
        b"(",
        b")",
        b"errors:",
        b"temps:",
        b" C",
        b"%",
        b"index",
        b"temperature.gpu",
        b"power.draw [W]",
        b"timestamp",
        b"2024/03/11 14:02:11.123",
        b"\x00",
        b"\xff",
        b"e9",
        b"nan",
        b"inf",
    ]
)
TRACE_BYTES = st.lists(TOKENS, max_size=80).map(b"".join) | st.binary(max_size=200)


def _write(tmp: Path, data: bytes) -> Path:
    path = tmp / "fuzz.txt"
    path.write_bytes(data)
    return path


def _only_import_failed(read, path: Path) -> None:
    try:
        read(path)
    except ImportFailed as exc:
        assert str(exc).startswith(str(path)) and "\n" not in str(exc)


@FUZZ
@given(data=TRACE_BYTES)
def test_nvidia_smi_reader_fails_only_cleanly(tmp_path_factory, data):
    path = _write(tmp_path_factory.mktemp("f"), data)
    _only_import_failed(lambda p: nvidia_smi.read(p, ["index", "temperature.gpu"], 1.0), path)
    _only_import_failed(lambda p: nvidia_smi.read(p, None, 1.0), path)


@FUZZ
@given(data=TRACE_BYTES)
def test_dcgmi_reader_fails_only_cleanly(tmp_path_factory, data):
    _only_import_failed(lambda p: dcgmi.read(p, 1.0), _write(tmp_path_factory.mktemp("f"), data))


@FUZZ
@given(data=TRACE_BYTES)
def test_gpu_burn_reader_fails_only_cleanly(tmp_path_factory, data):
    _only_import_failed(gpu_burn.read, _write(tmp_path_factory.mktemp("f"), data))


@FUZZ
@given(data=TRACE_BYTES)
def test_csv_reader_fails_only_cleanly(tmp_path_factory, data):
    options = csv_import.CsvOptions(
        time_col="timestamp", time_unit="s", device_col="index", mapping={"temp_c": "0"}
    )
    path = _write(tmp_path_factory.mktemp("f"), b"timestamp,index,0\n" + data)
    _only_import_failed(lambda p: csv_import.read(p, options), path)


READING = st.one_of(
    st.none(), st.floats(min_value=0, max_value=2000, allow_nan=False).map(lambda v: round(v, 2))
)


@FUZZ
@given(
    rows=st.lists(st.tuples(READING, READING), min_size=1, max_size=30),
    units=st.booleans(),
    header=st.booleans(),
    unreadable=st.sampled_from(["[N/A]", "[Not Supported]"]),
)
def test_nvidia_smi_values_read_back_exactly(tmp_path_factory, rows, units, header, unreadable):
    def cell(value, unit):
        if value is None:
            return unreadable
        return f"{value:.2f} {unit}" if units else f"{value:.2f}"

    lines = ["index, power.draw [W], clocks.sm [MHz]"] if header else []
    for power, clock in rows:
        lines.append(f"0, {cell(power, 'W')}, {cell(clock, 'MHz')}")
    path = tmp_path_factory.mktemp("f") / "smi.csv"
    path.write_text("\n".join(lines) + "\n")
    query = None if header else ["index", "power.draw", "clocks.sm"]
    trace = nvidia_smi.read(path, query, 1.0)
    device = trace.devices[0]
    assert device.values["power_w"] == [p for p, _ in rows]
    assert device.values["sm_clock_mhz"] == [c for _, c in rows]
    assert device.t == [float(k) for k in range(len(rows))]
