"""The field registry is the one list of metrics: it follows ``Telemetry`` exactly, and every
other list is derived from it."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from soak import fields
from soak.fields import Columns, FieldStats
from soak.model import TELEMETRY_METRICS
from soak.report.summary import WINDOW_KEYS
from soak.store import _SCHEMA

REPO = Path(__file__).resolve().parents[1]


def test_the_registry_declares_each_telemetry_field_once_in_its_order() -> None:
    assert tuple(f.name for f in fields.FIELDS) == TELEMETRY_METRICS


def test_the_store_schema_types_come_from_the_registry() -> None:
    columns = dict(re.findall(r"(\w+) (INTEGER|REAL)", _SCHEMA.split("CREATE TABLE telemetry")[1]))
    for f in fields.FIELDS:
        assert columns[f.name] == ("INTEGER" if f.integer else "REAL"), f.name
    assert columns["energy_j"] == "REAL" and columns["ecc_uncorrected"] == "INTEGER"


def test_derived_lists_are_the_registrys() -> None:
    assert WINDOW_KEYS == fields.SUMMARY_METRICS
    assert set(fields.SUMMARY_METRICS) <= set(fields.WINDOW_METRICS)
    assert fields.FAILING_COUNTERS == ("ecc_uncorrected", "retired_pages")
    assert set(fields.FAILING_COUNTERS) <= set(fields.FOLLOWED)
    assert fields.label("mem_temp_c") == "HBM temperature"
    assert fields.label("hw_any") == "any HW reason"


def test_prometheus_names_carry_a_base_unit_and_are_unique() -> None:
    names = [f.prom for f in fields.FIELDS if f.prom]
    assert len(names) == len(set(names))
    units = ("_celsius", "_hertz", "_watts", "_ratio", "_joules", "_errors", "_pending",
             "_failure", "_pages", "_replay", "_processes", "_bytes")  # fmt: skip
    assert all(n.endswith(units) for n in names), names


def test_no_module_keeps_its_own_list_of_metric_names() -> None:
    """A tuple or set literal of two or more telemetry names outside the registry is a second
    hand-kept list: derive it from ``soak.fields`` instead."""
    metric = "|".join(TELEMETRY_METRICS)
    pattern = re.compile(rf'[\(\{{\[]\s*"({metric})",\s*"({metric})"')
    offenders = [
        str(path.relative_to(REPO))
        for path in sorted((REPO / "soak").rglob("*.py"))
        if path.name != "fields.py"
        and "devices" not in path.parts  # vendor tables map names
        and pattern.search(path.read_text())
    ]
    assert not offenders, offenders


def test_a_devices_columns_are_the_registrys_fields_read_as_attributes() -> None:
    """The store's series are read as ``tele.temp_c``: one column per field of the registry,
    NaN where a store lacks it, never written over, and no column the registry lacks."""
    t = np.arange(3.0)
    tele = Columns({"t_s": t, "temp_c": np.array([40.0, 41.0, 42.0])})
    assert list(tele) == ["t_s", *(f.name for f in fields.FIELDS)]
    assert tele.temp_c.tolist() == [40.0, 41.0, 42.0] and tele["temp_c"] is tele.temp_c
    assert all(np.isnan(getattr(tele, f.name)).all() for f in fields.FIELDS if f.name != "temp_c")
    with pytest.raises(AttributeError):
        tele.temp_c = t  # type: ignore[misc]
    with pytest.raises(KeyError, match="fan_rpm"):
        Columns({"t_s": t, "fan_rpm": t})


def test_a_windows_statistics_are_the_registrys_window_fields_read_as_attributes() -> None:
    """``stats.median.temp_c``: one figure per window field, None where not available (a
    field a statistic was not given), never written over, and no field the registry's
    windows lack; summary.json goes over the same names as a mapping."""
    from soak.analysis.windows import Window, WindowStats

    median = FieldStats({"temp_c": 66.0})
    assert median.temp_c == 66.0 and median["temp_c"] == 66.0 and median.power_w is None
    assert list(median) == list(fields.WINDOW_METRICS) and median.get("t_s") is None
    assert (median | {"power_w": 700.0}).power_w == 700.0 and median.power_w is None
    with pytest.raises(AttributeError):
        median.temp_c = 1.0  # type: ignore[misc]
    with pytest.raises(KeyError, match="fan_rpm"):
        FieldStats({"fan_rpm": 1.0})
    stats = WindowStats(Window(0.0, 1.0), {"temp_c": 66.0}, {}, {}, {}, {}, {}, {})
    assert isinstance(stats.p90, FieldStats) and stats.median.temp_c == 66.0
