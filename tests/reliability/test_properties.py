"""Property-based: the parsers of everything an operator or a file can hand soak either
accept it or raise soak's own error (ConfigError, StoreError) with one line, never a
traceback. Hypothesis found, and these keep fixed: a summary.json with a list for its
schema_version or with bytes that are not UTF-8, a profile that is not UTF-8, a profile
whose equilibrium check interval or slope threshold is 0 (the detector looped forever or
divided by zero), control characters in a flag echoed across several lines, and damaged
run stores (torn copies, flipped bytes, edited rows) surfacing as sqlite3, JSON, enum and
type errors from deep inside the report."""

from __future__ import annotations

import contextlib
import io
import json
import math
import shutil
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from soak.analysis.equilibrium import OnlineDetector
from soak.cli import main
from soak.devices.sim import FAULT_KINDS, SimServer, parse_fault
from soak.errors import ConfigError, StoreError
from soak.pipeline import analyze
from soak.profile import Checks, Windows, load_profile, parse_profile
from soak.report.summary import load_summary
from soak.store import STORE_NAME, RunStore

QUICK = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# -- TOML profiles --------------------------------------------------------------------------

PROFILE_KEYS = sorted(
    {"name", "description", "windows", "checks", "floors", "device_names", "min_rate", "source"}
    | {f for f in Windows.__dataclass_fields__}
    | {f for f in Checks.__dataclass_fields__}
)
scalars = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.text(max_size=8),
)
toml_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(PROFILE_KEYS), inner, max_size=4)
    ),
    max_leaves=10,
)


def toml(value: object) -> str:
    """A TOML inline rendering of ``value`` (what tomllib would read back)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml(v) for v in value) + "]"
    assert isinstance(value, dict)
    return "{" + ", ".join(f"{json.dumps(k)} = {toml(v)}" for k, v in value.items()) + "}"


def _accepts_or_config_error(text: str):
    try:
        return parse_profile(text, "fuzz.toml")
    except ConfigError as exc:
        assert "\n" not in str(exc)
        return None


@pytest.mark.slow
@QUICK
@given(st.dictionaries(st.sampled_from(PROFILE_KEYS), toml_values, max_size=5))
def test_profile_documents_are_accepted_or_named(document):
    text = "\n".join(f"{json.dumps(k)} = {toml(v)}" for k, v in document.items())
    _accepts_or_config_error(text)


@QUICK
@given(st.text(max_size=60))
def test_profile_text_is_accepted_or_named(text):
    _accepts_or_config_error(text)


@QUICK
@given(st.binary(max_size=60))
def test_profile_files_of_any_bytes_are_accepted_or_named(tmp_path, data):
    path = tmp_path / "fuzz.toml"
    path.write_bytes(data)
    try:
        load_profile(str(path))
    except ConfigError as exc:
        assert "\n" not in str(exc)


window_numbers = st.one_of(
    st.sampled_from([0, 0.0, 1e-9, 1e-3, 0.5, 1.0, 1e300]), st.floats(0, 1e5), st.integers(0, 10)
)


@pytest.mark.slow
@settings(QUICK, max_examples=60)
@given(
    st.fixed_dictionaries({}, optional=dict.fromkeys(Windows.__dataclass_fields__, window_numbers))
)
def test_an_accepted_profile_keeps_the_online_detector_bounded(windows):
    """Whatever windows a profile may set, an hour of ticks costs the detector a bounded
    amount of work: no zero interval loops it, no zero threshold divides by zero."""
    profile = _accepts_or_config_error(
        "[windows]\n" + "\n".join(f"{k} = {toml(v)}" for k, v in windows.items())
    )
    if profile is None:
        return
    detector = OnlineDetector(profile.windows)
    detector.start(10.0)
    for t in range(0, 3600, 15):
        detector.add_telemetry(float(t), 60 - 30 * math.exp(-t / 300), 600.0, 1800.0)
        detector.add_rate("gemm", float(t), 1e14)
        detector.update(float(t))
        eta = detector.eta_s(float(t))
        assert eta is None or (math.isfinite(eta) and eta >= 0.0)
    # whatever the windows, an equilibrium it dates lies within the load it has seen
    assert detector.equilibrium_s is None or 10.0 <= detector.equilibrium_s <= 3600.0


# -- --sim-fault specs ----------------------------------------------------------------------

FAULT_KEYS = {k for kind in FAULT_KINDS.values() for k in (*kind.required, *kind.optional)}
fault_keys = st.sampled_from([*sorted(FAULT_KEYS), "x", ""])
fault_values = st.one_of(
    st.integers(-(10**20), 10**20).map(str),
    st.floats().map(repr),
    st.sampled_from(["1e400", "-0", "0x10", "1_0", "nan", "inf", " 3 ", ""]),
    st.text(max_size=4),
)


@pytest.mark.slow
@QUICK
@given(
    st.sampled_from([*FAULT_KINDS, "", "meteor"]),
    st.lists(st.tuples(fault_keys, fault_values), max_size=4),
    st.text(max_size=3),
)
def test_fault_specs_are_accepted_or_named(kind, pairs, tail):
    spec = kind + "".join(f":{k}={v}" for k, v in pairs) + tail
    try:
        parse_fault(spec)
        SimServer(gpus=8, faults=(spec,), seed=0)  # gpu range and SKU limits
    except ConfigError as exc:
        assert "\n" not in str(exc).replace(spec, "")


# -- summary.json ---------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["schema_version", "verdict", "devices"]), inner, max_size=3
        )
    ),
    max_leaves=8,
)


@pytest.mark.slow
@QUICK
@given(st.one_of(st.binary(max_size=40), json_values.map(lambda v: json.dumps(v).encode())))
def test_summaries_of_any_content_load_or_are_rejected_in_one_line(tmp_path, data):
    path = tmp_path / "summary.json"
    path.write_bytes(data)
    try:
        summary = load_summary(path)
    except ConfigError as exc:
        assert "\n" not in str(exc)
    else:
        assert summary["schema_version"] == 1 and type(summary["schema_version"]) is int


# -- the command line -----------------------------------------------------------------------

FLAGS = [
    "run", "report", "--backend", "--workload", "--hours", "--minutes", "--until-steady",
    "--interval", "--baseline", "--devices", "--profile", "--seed", "--tag", "--option",
    "--heartbeat-timeout", "--sim-gpus", "--sim-sku", "--sim-fault", "-v",
]  # fmt: skip
VALUES = [
    "sim", "cpu", "gemm", "mix", "1", "0", "-1", "1e309", "nan", "inf", "0,1", "3,3", "x=y",
    "=", "gemm_n=64", "gemm_n=x", "gemm_n=1.5", "dtype=fp8", "step_s=0", "mem_bytes=4e6",
    "cpu_threads=true", "default", "nope.toml", "airflow:gpu=1:factor=2", "xid:gpu=9:at=1",
    "999999999999999999999", "0x10", "",
]  # fmt: skip


class _RunAsked(BaseException):  # not an Exception: soak's catch-all must not take it
    """A command line that got as far as starting a run: accepted."""


@pytest.mark.slow
@QUICK
@given(st.lists(st.one_of(st.sampled_from(FLAGS + VALUES), st.text(max_size=6)), max_size=7))
def test_command_lines_are_accepted_or_one_line_exit_2(monkeypatch, tmp_path, argv):
    def accepted(config, **kwargs):
        raise _RunAsked

    monkeypatch.setattr("soak.runner.run", accepted)
    if argv[:1] not in (["run"], ["report"]):
        argv = ["run", "--out", str(tmp_path / "reports"), *argv]
    err = io.StringIO()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = main(argv)
    except _RunAsked:
        return
    assert code in (2, 3)  # report on a path that is not a run folder: 2
    assert len(err.getvalue().strip().splitlines()) == 1, err.getvalue()
    assert not (tmp_path / "reports").exists()


# -- damaged run stores ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_store(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("small")
    argv = ["run", "--backend", "sim", "--workload", "gemm", "--sim-gpus", "2", "--seed", "5"]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        main([*argv, "--minutes", "2", "--baseline", "2", "--out", str(out)])
    (store,) = out.glob(f"*/*/{STORE_NAME}")
    return store


EDITS = [
    "UPDATE meta SET value='x' WHERE key='store_version'",
    "UPDATE meta SET value='{' WHERE key='run'",
    "UPDATE meta SET value='[1, 2]' WHERE key='stop'",
    "UPDATE meta SET value='3' WHERE key='run'",
    "DELETE FROM meta WHERE key != 'store_version'",
    "DROP TABLE devices",
    "DROP TABLE telemetry",
    "UPDATE devices SET info='[1]'",
    "UPDATE devices SET info='{\"index\": 0}'",
    "UPDATE events SET kind='bogus'",
    "UPDATE events SET details='7'",
    "UPDATE telemetry SET temp_c='hot'",
    "UPDATE work SET unit=x'ff'",
]


@pytest.mark.slow
@settings(QUICK, max_examples=60)
@given(
    st.one_of(
        st.tuples(st.just("truncate"), st.floats(0, 1)),
        st.tuples(
            st.just("flip"),
            st.lists(st.tuples(st.floats(0, 1), st.integers(1, 255)), min_size=1, max_size=30),
        ),
        st.tuples(st.just("edit"), st.sampled_from(EDITS)),
    )
)
def test_a_damaged_store_reads_or_raises_store_error(small_store, tmp_path, damage):
    folder = tmp_path / "run"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    target = folder / STORE_NAME
    data = small_store.read_bytes()
    how, what = damage
    if how == "truncate":
        target.write_bytes(data[: int(len(data) * what)])
    elif how == "flip":
        damaged = bytearray(data)
        for where, mask in what:
            damaged[min(int(len(damaged) * where), len(damaged) - 1)] ^= mask
        target.write_bytes(bytes(damaged))
    else:
        target.write_bytes(data)
        with contextlib.closing(sqlite3.connect(target)) as conn:
            conn.execute(what)
            conn.commit()
    try:
        store = RunStore.open(folder)
        try:
            analyze(store, load_profile(None))
        finally:
            store.close_read()
    except StoreError as exc:
        assert "\n" not in str(exc) and str(target) in str(exc)
