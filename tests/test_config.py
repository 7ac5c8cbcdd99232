"""Acceptance profiles: the built-ins load, SKU floors say where their numbers come from, and
every bad key or value is a one-line error naming it."""

import dataclasses
import re

import pytest

from soak.config import Profile, builtin_profiles, load_profile, parse_profile
from soak.errors import ConfigError

SKU_PROFILES = ("h100-sxm", "h200", "a100-sxm", "mi300x")


def test_default_and_sku_profiles_are_built_in():
    assert set(builtin_profiles()) >= {"default", *SKU_PROFILES}
    default = load_profile(None)
    assert default == load_profile("default") and default.floors == {}
    assert default.checks.min_throughput_retention == 0.95


@pytest.mark.parametrize("name", SKU_PROFILES)
def test_sku_profiles_have_floors_with_their_sources(name):
    profile = load_profile(name)
    assert profile.device_names
    assert set(profile.floors) == {"gemm", "membw"}
    for workload, parts in profile.floors.items():
        assert list(parts) == [workload]  # the part that runs alone in that workload
        source = profile.floor_sources[workload][workload]
        assert re.search(r"\[(datasheet|measured|assumed)\]", source), source
    # The thresholds are the default ones: a SKU profile only adds floors (its ddp bus
    # bandwidth floor among them, with its source), and the drift it expects (shown for
    # comparison, never a floor).
    default = load_profile(None).checks
    assert 0 < profile.checks.expected_power_drift < default.max_power_drift
    assert profile.checks.min_busbw_Bps > 0
    assert re.search(r"\[datasheet\].*\[assumed\]", profile.checks.min_busbw_source)
    busbw = ("min_busbw_Bps", "min_busbw_source", "min_busbw_ranks")
    own = {"expected_power_drift": 0.0} | {k: getattr(default, k) for k in busbw}
    assert dataclasses.replace(profile.checks, **own) == default


def test_the_mi300x_busbw_floor_holds_for_its_whole_mesh_only():
    assert load_profile("mi300x").checks.min_busbw_ranks == 8  # fewer ranks, fewer links
    assert load_profile("h100-sxm").checks.min_busbw_ranks == 2  # NVSwitch: any pair


def test_our_h200_measurement_is_the_h200_floors_source():
    h200 = load_profile("h200")
    assert "679 TFLOP/s" in h200.floor_sources["gemm"]["gemm"]
    assert "4.32 TB/s" in h200.floor_sources["membw"]["membw"]
    assert h200.floors["gemm"]["gemm"] < 679e12 and h200.floors["membw"]["membw"] < 4.32e12


def test_a_profile_round_trips_through_the_run_store_copy():
    for name in builtin_profiles():
        profile = load_profile(name)
        assert Profile.from_dict(profile.as_dict()) == profile


def test_a_profile_file_is_loaded_by_path(tmp_path):
    path = tmp_path / "strict.toml"
    path.write_text("[checks]\nmin_throughput_retention = 0.97\nrequire_equilibrium = true\n")
    profile = load_profile(str(path))
    assert profile.name == "strict" and profile.checks.require_equilibrium


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[checks]\nmin_throughput_retnetion = 0.9\n", "checks.min_throughput_retnetion: unknown"),
        ("[checks]\nmin_throughput_retention = 'high'\n", "expected a number, got 'high'"),
        ("[checks]\nmin_temp_margin_c = -3\n", "checks.min_temp_margin_c: must be a finite"),
        ("[windows]\neq_checks = 2.5\n", "windows.eq_checks: expected a whole number"),
        ("[windows]\neq_check_interval_s = 0\n", "eq_check_interval_s must be >= 1"),
        ("[checks]\nrequire_equilibrium = 1\n", "expected true or false"),
        ("[checks]\nmin_busbw_source = 3\n", "checks.min_busbw_source: expected a string"),
        ("colour = 'red'\n", "unknown key 'colour'"),
        ("device_names = 'H100'\n", "device_names: expected a list of device names"),
        ("[floors.gemm]\ngemm = 6e14\n", "floors.gemm.gemm: expected {min_rate"),
        ("[floors.gemm.gemm]\nsource = 'x'\n", "floors.gemm.gemm.min_rate: missing"),
        ("[floors.gemm.gemm]\nmin_rate = 0\n", "floors.gemm.gemm.min_rate: must be > 0"),
        ("[floors.gemm.gemm]\nmin_rate = 1\nsorce = 'x'\n", "floors.gemm.gemm.sorce: unknown"),
        ("[floors]\ngemm = 1\n", "floors.gemm: expected [floors.WORKLOAD.PART] tables"),
        ("[checks\n", "not valid TOML"),
    ],
)
def test_bad_keys_and_values_are_one_line_errors_naming_them(text, needle):
    with pytest.raises(ConfigError) as err:
        parse_profile(text, "bad.toml")
    message = str(err.value)
    assert needle in message and "\n" not in message and message.startswith("bad.toml")


def test_unknown_profile_names_the_built_ins():
    with pytest.raises(ConfigError, match="h100-sxm"):
        load_profile("h300")
