"""The CPU's GEMM dtype and size: the hottest dtype its flags say it runs natively, the
fastest side timed at setup, an asked dtype still winning, and the reasons recorded."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import workloads.device as device_module
import workloads.gemm as gemm_module
from soak.cli import main
from tests.workloads.sizes import on_cpu
from workloads import WorkloadOptions
from workloads.device import cpu_flags, cpu_gemm_dtype, resolve_dtype
from workloads.gemm import GemmWorkload, fastest_size
from workloads.mix import MixWorkload
from workloads.train import TrainWorkload

CPU = torch.device("cpu")

# Flag sets of real CPU families (trimmed /proc/cpuinfo ``flags`` lines).
SAPPHIRE_RAPIDS = "fpu avx2 fma avx512f avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8"
COOPER_LAKE = "fpu avx2 fma avx512f avx512bw avx512_vnni avx512_bf16"
ICE_LAKE = "fpu avx2 fma avx512f avx512bw avx512_vnni avx512ifma"
ZEN4 = "fpu avx2 fma avx512f avx512_bf16 avx512_vnni"
ZEN2 = "fpu avx2 fma sha_ni"
INT8_ONLY_AMX = "fpu avx2 fma avx512f amx_tile amx_int8"


@pytest.mark.parametrize(
    ("flags", "dtype", "reason"),
    [
        (SAPPHIRE_RAPIDS, "bf16", "CPU has amx_bf16"),
        (COOPER_LAKE, "bf16", "CPU has avx512_bf16"),
        (ZEN4, "bf16", "CPU has avx512_bf16"),
        (ICE_LAKE, "fp32", "CPU has no amx_bf16 or avx512_bf16"),
        (ZEN2, "fp32", "CPU has no amx_bf16 or avx512_bf16"),
        (INT8_ONLY_AMX, "fp32", "CPU has no amx_bf16 or avx512_bf16"),
        ("", "fp32", "CPU has no amx_bf16 or avx512_bf16"),
    ],
    ids=["sapphire-rapids", "cooper-lake", "zen4", "ice-lake", "zen2", "int8-amx", "no-flags"],
)
def test_cpu_dtype_is_the_hottest_its_flags_run_natively(
    flags: str, dtype: str, reason: str
) -> None:
    choice = cpu_gemm_dtype(flags.split())
    assert (choice.name, choice.reason) == (dtype, reason)


@pytest.fixture
def fake_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Make the workloads read a /proc/cpuinfo with the given flags line."""

    def use(flags: str) -> None:
        cpuinfo = tmp_path / "cpuinfo"
        cpuinfo.write_text(f"processor\t: 0\nmodel name\t: Fake\nflags\t\t: {flags}\n\n")
        monkeypatch.setattr(device_module, "CPUINFO", cpuinfo)

    return use


def test_flags_come_from_cpuinfo_else_from_torchs_check(
    fake_cpu, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_cpu(COOPER_LAKE)
    assert cpu_flags() == frozenset(COOPER_LAKE.split())
    monkeypatch.setattr(device_module, "CPUINFO", tmp_path / "missing")
    found = {k for k, v in torch.cpu.get_capabilities().items() if v is True}
    assert cpu_flags() == found


@pytest.mark.slow
@pytest.mark.parametrize(
    ("flags", "dtype"), [(SAPPHIRE_RAPIDS, "bf16"), (ICE_LAKE, "fp32")], ids=["amx", "no-bf16"]
)
def test_default_gemm_train_and_mix_follow_the_cpus_choice(
    fake_cpu, tiny: WorkloadOptions, flags: str, dtype: str
) -> None:
    fake_cpu(flags)
    gemm = on_cpu(GemmWorkload, tiny)
    assert gemm.describe()["dtype"] == dtype
    assert gemm.describe()["dtype_reason"] == cpu_gemm_dtype(flags.split()).reason
    amp = "bfloat16" if dtype == "bf16" else "none"
    assert on_cpu(TrainWorkload, tiny).describe()["amp"] == amp
    mix = on_cpu(MixWorkload, tiny)
    assert (mix.gemm.dtype_name, mix.describe()["parts"]["train"]["amp"]) == (dtype, amp)
    assert all(c.ok for c in mix.verify())


@pytest.mark.slow
def test_an_asked_dtype_wins_over_the_cpus_choice(fake_cpu, tiny: WorkloadOptions) -> None:
    fake_cpu(SAPPHIRE_RAPIDS)
    gemm = on_cpu(GemmWorkload, tiny, dtype="fp32")
    assert (gemm.dtype_name, gemm.dtype_choice.reason) == ("fp32", "asked")
    assert on_cpu(TrainWorkload, tiny, dtype="fp32").describe()["amp"] == "none"
    fake_cpu(ICE_LAKE)  # no native bf16: torch converts in software, but it runs
    assert resolve_dtype("bf16", CPU).name == "bf16"
    with pytest.raises(ValueError, match=r"^dtype: tf32 needs a CUDA device$"):
        resolve_dtype("tf32", CPU)


@pytest.mark.slow  # opens the CPU backend and imports torch in the coordinator: ~2.5 s
def test_a_dtype_the_cpu_cannot_run_is_a_one_line_error_before_anything_is_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "runs"
    argv = ["run", "--backend", "cpu", "--option", "dtype=tf32", "--minutes", "1"]
    assert main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == "soak: error: --option dtype: tf32 needs a CUDA device\n"
    assert not out.exists()


def rates_measure(rates: dict[int, float], product_s: dict[int, float], calls: list[int]):
    def measure(n: int, seconds: float) -> tuple[float, float]:
        calls.append(n)
        return rates[n], product_s.get(n, seconds / 10)

    return measure


def test_fastest_size_keeps_the_best_rate_over_passes() -> None:
    calls: list[int] = []
    rates = {1024: 1.5e12, 2048: 1.1e12, 4096: 0.9e12}
    choice = fastest_size([1024, 2048, 4096], rates_measure(rates, {}, calls), 3.0)
    assert choice.n == 1024 and choice.rates == rates
    assert calls == [1024, 2048, 4096] * 2
    assert choice.reason == "fastest at start; GFLOP/s by side: 1024: 1500, 2048: 1100, 4096: 900"


def test_a_side_whose_one_product_outlasts_its_share_ends_the_sweep() -> None:
    calls: list[int] = []
    rates = {1024: 0.2e12, 2048: 0.21e12, 3072: 0.3e12, 4096: 0.4e12}
    measure = rates_measure(rates, {2048: 5.0, 3072: 9.0}, calls)
    choice = fastest_size([1024, 2048, 3072, 4096], measure, 4.0)
    assert calls == [1024, 2048, 1024, 2048]
    assert choice.n == 2048 and set(choice.rates) == {1024, 2048}


@pytest.mark.slow
def test_setup_times_the_sides_that_fit_and_runs_the_fastest(
    tiny: WorkloadOptions, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gemm_module, "CPU_SIZES", (32, 64, 128))
    monkeypatch.setattr(gemm_module, "CALIBRATE_S", 0.3)
    fits_64 = 2 * 64 * 64 * 8  # two operands and two outputs at fp32
    gemm = on_cpu(GemmWorkload, tiny, dtype="fp32", gemm_n=None, mem_bytes=fits_64)
    info = gemm.describe()
    assert set(info["n_rates_flop_s"]) == {"32", "64"}
    assert info["n"] == max(gemm.size.rates, key=lambda n: gemm.size.rates[n])
    assert info["n_reason"].startswith("fastest at start; GFLOP/s by side: 32: ")
    assert gemm.ring[0].shape == (info["n"], info["n"])
    asked = on_cpu(GemmWorkload, tiny, gemm_n=100)
    assert (asked.n, asked.size.reason) == (112, "asked")


def test_cpu_verification_walks_the_rows_of_a_large_product(
    tiny: WorkloadOptions, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gemm_module, "CPU_VERIFY_ROWS", 64)
    gemm = on_cpu(GemmWorkload, tiny, dtype="fp32", gemm_n=128)
    gemm.step()
    assert gemm.last is not None
    gemm.outputs[gemm.last[2]][100, 5] += 1000.0
    first = gemm.verify()[0]
    assert (first.ok, first.checked) == (True, 64 * 128)  # rows 0-63
    second = gemm.verify()[0]
    assert (second.ok, second.mismatched) == (False, 1)  # rows 64-127
