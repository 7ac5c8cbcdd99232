"""The pieces the NVML and AMD backends share: sentinel cleaning, plausibility, what a failed
read means and how it is logged, the liveness check, and device selection."""

from __future__ import annotations

import logging
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from soak.devices.common import (
    Call,
    LogOnce,
    Metric,
    clean_number,
    confirm_alive,
    failed_read,
    positive,
    select,
    temp_ok,
    why_not,
)
from soak.errors import ConfigError, FunctionMissing, GpuLost, NoPermission, NotSupported, SoakError
from soak.model import Capability

log = logging.getLogger("soak.test.common")
U32_MAX = 0xFFFF_FFFF


@given(st.one_of(st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True)))
def test_clean_number_never_passes_a_sentinel_or_impossible_number(value: float) -> None:
    out = clean_number(value, frozenset({0xFF, U32_MAX}))
    if out is not None:
        assert out == value
        assert out not in (0xFF, U32_MAX)
        assert math.isfinite(out) and 0 <= out < 2**63 - 1


def test_clean_number_keeps_real_readings() -> None:
    assert clean_number(0, frozenset({U32_MAX})) == 0
    assert clean_number(True, frozenset()) == 1
    assert clean_number(61.5, frozenset()) == 61.5
    assert clean_number(9.2e18, frozenset()) is None  # NVML's HBM 'no reading'
    assert clean_number(-1.0, frozenset()) is None


def test_call_key_names_function_arguments_and_keywords() -> None:
    call = Call("nvmlDeviceGetMemoryInfo", ("A", "B"), (("version", "v2"),))
    assert call.key == "nvmlDeviceGetMemoryInfo(A, B, version=v2)"
    assert Call("amdsmi_get_power_info").key == "amdsmi_get_power_info()"


def test_metric_accepts_plausible_numbers_and_logs_the_rest_once(caplog) -> None:
    once = LogOnce(log, "test")
    temp = Metric("temp_c", (), temp_ok)
    count = Metric("ecc_uncorrected", (), integer=True)
    raw = Metric("clock_reasons", (), raw=True)
    with caplog.at_level(logging.INFO, logger=log.name):
        assert temp.accept(61.0, "read()", once) == 61.0
        assert count.accept(3.0, "read()", once) == 3 and isinstance(
            count.accept(3.0, "", once), int
        )
        assert temp.accept("text", "read()", once) == "text"
        assert temp.accept(None, "read()", once) is None
        assert raw.accept((1, 2), "read()", once) == (1, 2)
        for _ in range(3):
            assert temp.accept(0.0, "read()", once) is None  # 'no sensor'
        assert count.accept((1, 2), "other()", once) is None  # no number: not passed on
    messages = [r.message for r in caplog.records]
    assert messages == [
        "test: temp_c read 0.0 from read(): not plausible, read as None",
        "test: ecc_uncorrected read (1, 2) from other(): not plausible, read as None",
    ]


def test_why_not_prefers_permission_then_support() -> None:
    n, p, m = Capability.NOT_SUPPORTED, Capability.NO_PERMISSION, Capability.MISSING
    assert why_not([m, n, p]) is p
    assert why_not([m, n]) is n
    assert why_not([m]) is m
    assert why_not([]) is m


@pytest.mark.parametrize(
    ("exc", "cap", "level"),
    [
        (NotSupported("f: NotSupported"), Capability.NOT_SUPPORTED, logging.INFO),
        (NoPermission("f: NoPermission"), Capability.NO_PERMISSION, logging.WARNING),
        (FunctionMissing("f: not in this binding"), Capability.MISSING, logging.INFO),
        (SoakError("f: Timeout"), Capability.SUPPORTED, logging.WARNING),  # one missing reading
    ],
)
def test_failed_read_is_a_capability_logged_once(caplog, exc, cap, level) -> None:
    once = LogOnce(log, "test")
    with caplog.at_level(logging.INFO, logger=log.name):
        for _ in range(5):
            assert failed_read(once, "f()", exc, "ErrorName", " on device 2") is cap
    (record,) = caplog.records
    assert record.levelno == level
    assert "f()" in record.message and "on device 2" in record.message


def test_confirm_alive_loses_only_a_device_that_cannot_answer() -> None:
    def fails(exc: SoakError):
        def read() -> None:
            raise exc

        return read

    confirm_alive(1, lambda: 1980)
    for unreadable in (NotSupported("x"), NoPermission("x"), FunctionMissing("x")):
        confirm_alive(1, fails(unreadable))  # the device answered, just not this
    with pytest.raises(GpuLost, match="device 1"):
        confirm_alive(1, fails(SoakError("Unknown Error")))


def test_select_keeps_the_order_asked_and_rejects_what_is_not_there() -> None:
    assert select([0, 1, 2, 3], None, "x") == [0, 1, 2, 3]
    assert select([0, 1, 2, 3], [3, 1], "x") == [3, 1]
    with pytest.raises(ConfigError, match=r"--devices: x has no device 7 \(found 0, 1, 2, 3\)"):
        select([0, 1, 2, 3], [7], "x")
    with pytest.raises(ConfigError, match="--devices: device 1 is listed twice"):
        select([0, 1, 2, 3], [1, 2, 1], "x")
    with pytest.raises(ConfigError, match="--devices: no device chosen"):
        select([0, 1], [], "x")


def test_plausibility_of_temperatures_and_limits() -> None:
    assert temp_ok(61) and not temp_ok(0) and not temp_ok(9.2e18)
    assert positive(700.0) and not positive(0)
