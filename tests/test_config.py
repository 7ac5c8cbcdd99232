"""Acceptance profiles: the built-ins load, SKU floors say where their numbers come from, and
every bad key or value is a one-line error naming it."""

import dataclasses
import re
from pathlib import Path

import pytest

from soak.bmc import BmcOptions
from soak.config import RunConfig
from soak.errors import ConfigError
from soak.nodegroup import NodeGroup
from soak.profile import (
    Checks,
    Profile,
    Windows,
    builtin_profiles,
    load_profile,
    meaning,
    parse_profile,
)
from workloads.base import OptionError, WorkloadOptions

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
        ("[windows]\neq_window_s = 0.5\n", "eq_window_s must be >= 1"),
        ("[checks]\nrequire_equilibrium = 1\n", "expected true or false"),
        ("[checks]\nmin_busbw_source = 3\n", "checks.min_busbw_source: expected a string"),
        ("colour = 'red'\n", "unknown key 'colour'"),
        ("device_names = 'H100'\n", "device_names: expected a list of device names"),
        ("[floors.gemm]\ngemm = 6e14\n", "floors.gemm.gemm: expected {min_rate"),
        ("[floors.gemm.gemm]\nsource = 'x'\n", "floors.gemm.gemm.min_rate: missing"),
        ("[floors.gemm.gemm]\nmin_rate = 0\n", "floors.gemm.gemm.min_rate: must be > 0"),
        ("[floors.gemm.gemm]\nmin_rate = 1\nsorce = 'x'\n", "floors.gemm.gemm.sorce: unknown"),
        ("[floors]\ngemm = 1\n", "floors.gemm: expected [floors.WORKLOAD.PART] tables"),
        ("[checks]\ndesign_inlet_c = 70\n", "checks.design_inlet_c: 70 °C is not an inlet"),
        ("[checks\n", "not valid TOML"),
        ("[sku]\nslowdown_tmp_c = 89\n", "sku.slowdown_tmp_c: unknown key"),
        ("[sku]\nslowdown_temp_c = 0\n", "sku.slowdown_temp_c: must be > 0"),
        ("[sku]\nsource = 3\n", "sku.source: expected a string"),
        ("sku = 3\n", "bad.toml: sku: expected a table"),
    ],
)
def test_bad_keys_and_values_are_one_line_errors_naming_them(text, needle):
    with pytest.raises(ConfigError) as err:
        parse_profile(text, "bad.toml")
    message = str(err.value)
    assert needle in message and "\n" not in message and message.startswith("bad.toml")


def test_a_profile_at_another_design_inlet_changes_that_setting_alone():
    profile = load_profile("h100-sxm")
    hotter = profile.with_design_inlet(40)
    assert hotter.checks.design_inlet_c == 40.0 and profile.checks.design_inlet_c == 35.0
    assert dataclasses.replace(hotter.checks, design_inlet_c=35.0) == profile.checks
    assert (hotter.name, hotter.floors, hotter.windows) == (
        profile.name,
        profile.floors,
        profile.windows,
    )
    assert profile.with_design_inlet(-10).checks.design_inlet_c == -10.0


@pytest.mark.parametrize("inlet", [60.5, -11, float("nan"), float("inf"), True, "35"])
def test_a_design_inlet_out_of_range_is_a_one_line_error(inlet):
    with pytest.raises(ConfigError, match=r"^design inlet: .* is not an inlet from -10 to 60 °C$"):
        load_profile(None).with_design_inlet(inlet)


def test_unknown_profile_names_the_built_ins():
    with pytest.raises(ConfigError, match="h100-sxm"):
        load_profile("h300")


# -- the run config's own rules: every entry point gets them, not only the command line --
GROUP = NodeGroup(node=0, nodes=2, master_addr="10.0.0.7", master_port=23456)
BAD_RUNS = {
    "unknown workload": ({"workload": "fft"}, "--workload: unknown workload 'fft' (gemm,"),
    "a load that measures nothing": (
        {"duration_s": 0.6},
        "--minutes 0.01: 0.6 s of load measures nothing: the cold window starts 5 s into the "
        "load and a cold rate needs 15 s of it; at least 20 s (--minutes 0.34)",
    ),
    "zero interval": ({"interval_s": 0.0}, "--interval: must be > 0, got 0"),
    "negative baseline": ({"baseline_s": -1.0}, "--baseline: must be >= 0, got -1"),
    "heartbeat within a step": (
        {"backend": "cpu", "heartbeat_timeout_s": 1.0, "workload_options": {"step_s": 2.0}},
        "--heartbeat-timeout: 1 s must exceed the workload's step_s of 2 s",
    ),
    "ranks on the simulator": (
        {"workload": "ddp", "ranks": 2},
        "--ranks: only with --backend cpu and --workload ddp, or mix with --option mix_sync=1",
    ),
    "ranks without lock-step": (
        {"backend": "cpu", "workload": "gemm", "ranks": 2},
        "--ranks: only with --backend cpu",
    ),
    "lock-step mix on the simulator": (
        {"workload_options": {"mix_sync": True}},
        "--option mix_sync: the simulator does not model lock-step mix",
    ),
    "a fault without the simulator": (
        {"backend": "cpu", "sim_faults": ("inlet:delta=3",)},
        "--sim-fault: only with --backend sim",
    ),
    "a node group for gemm": (
        {"backend": "cpu", "workload": "gemm", "node_group": GROUP},
        "ddp across nodes (SOAK_DDP_NODES set): --workload is gemm, not ddp",
    ),
    "a node group on the simulator": (
        {"workload": "ddp", "node_group": GROUP},
        "--across-nodes: not with --backend sim",
    ),
    "a BMC port without a BMC": ({"bmc": {"port": 623}}, "--bmc-port: only with --bmc HOST"),
    "a BMC password file that is not there": (
        {"bmc": {"host": "bmc.example", "password_file": Path("/nonexistent/pw")}},
        "--bmc-password-file /nonexistent/pw: no such file",
    ),
}


@pytest.mark.parametrize("values,message", BAD_RUNS.values(), ids=BAD_RUNS.keys())
def test_a_run_config_refuses_what_cannot_run_in_one_line(values, message):
    values = dict(values)
    with pytest.raises(ConfigError) as raised:
        if "bmc" in values:
            values["bmc"] = BmcOptions(**values["bmc"])
        RunConfig(**{"backend": "sim", "workload": "gemm", "duration_s": 1800.0, **values})
    assert str(raised.value).startswith(message) and "\n" not in str(raised.value)


def test_a_short_profile_lets_a_short_run_measure_its_cold_window():
    short = dataclasses.replace(
        Profile().windows, cold_start_s=0.2, cold_length_s=0.8, steady_length_s=1.0
    )
    profile = dataclasses.replace(Profile(), windows=short)
    assert RunConfig(backend="cpu", workload="gemm", duration_s=5.0, profile=profile)
    with pytest.raises(ConfigError, match="at least 1 s"):
        RunConfig(backend="cpu", workload="gemm", duration_s=0.5, profile=profile)


def test_test_only_workload_options_are_not_operator_options():
    """The faults the ddp tests inject are set in the config, never through ``--option``."""
    with pytest.raises(OptionError, match="ddp_slow_rank: unknown") as raised:
        WorkloadOptions.typed([("ddp_slow_rank", "1")])
    assert "ddp_perturb_rank" not in str(raised.value) and "mix_sync" in str(raised.value)
    assert WorkloadOptions(ddp_slow_rank=1, ddp_slowdown=3.0).ddp_slow_rank == 1


def test_every_profile_setting_says_what_it_means():
    """The report's profile table explains each setting from the setting's own field."""
    for cls in (Windows, Checks):
        assert all(meaning(f) for f in dataclasses.fields(cls)), cls.__name__
    assert "power limit" in meaning(
        next(f for f in dataclasses.fields(Checks) if f.name == "min_power_limit_fraction")
    )
