"""Parameter tables of the simulated server: accelerator SKUs, workloads, the chassis.

Every number says where it comes from:

- ``[datasheet]``: the vendor's published specification;
- ``[nvidia-smi]``: a public ``nvidia-smi -q`` output of that part (thresholds, clocks, idle
  power, idle voltage), as collected in public issue threads;
- ``[measured]``: a public measurement of the part (benchmarks, blog posts);
- ``[derived]``: computed from other entries (the formula is next to it);
- ``[assumed]``: a stated assumption, chosen so the simulated behaviour matches what
  operators of these servers report (reasons given).

The physics that uses these lives in ``soak.devices.sim.physics``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

# Telemetry metrics an SXM board really lacks (``Telemetry`` field names). Fans belong to
# the chassis, not the GPU [nvidia-smi: "Fan Speed: N/A"]; since Ampere, page retirement is
# replaced by row remapping [nvidia-smi: "Retired Pages: N/A", "Remapped Rows" filled in].
NVIDIA_SXM_UNSUPPORTED = frozenset({"fan_pct", "retired_pages"})
# amdsmi reports bad (retired) pages but has no NVML-style row-remap flags [assumed].
AMD_OAM_UNSUPPORTED = frozenset({"fan_pct", "remap_pending", "remap_failure"})


@dataclass(frozen=True, slots=True)
class Cooling:
    """How the server's fans move the heat sink's resistance to air, per SKU (the chassis a
    part is sold in). The fans run slower at idle, so the sink's resistance is (1 +
    ``idle_excess``) x its load value; ``delay_s`` after a load begins they head for load
    speed, with a lag of ``lag_s``: the die holds a plateau above where it settles until
    then, and falls to it. Under load the controller hunts: the resistance swings by
    ±``hunt_frac`` over ``hunt_period_s``."""

    idle_excess: float = 0.0
    delay_s: float = 0.0
    lag_s: float = 60.0
    hunt_frac: float = 0.0
    hunt_period_s: float = 600.0

    @property
    def moves(self) -> bool:
        return self.idle_excess != 0.0 or self.hunt_frac != 0.0


# [assumed] An air-cooled chassis whose fans catch up late and hunt, chosen beside the V100
# gpu-burn trace (real-traces/v100x4-gpuburn-18h-lambda, host .42: GPU0 65 °C at 2 min, 61 °C
# from ~10 min on): with a ~150-s heat sink, a peak ~3-4 °C over the plateau at 5-6 min,
# settled by ~15 min; then ±1 °C over ~10 min (the slow cycling operators report; the V100
# trace swings by 2 °C peak to peak over hours). The SKUs without a trace of their own.
LATE_FANS = Cooling(idle_excess=0.4, delay_s=180.0, lag_s=120.0, hunt_frac=0.06)


@dataclass(frozen=True, slots=True)
class Sku:
    """One accelerator model: inventory, limits, V/f and leakage, throughput, thermals."""

    key: str
    name: str
    vendor: str
    memory_total_b: int
    # Power
    tdp_w: float  # default (and maximum) power limit
    min_power_limit_w: float
    idle_power_w: float  # at the idle clock and ~30 °C die
    hbm_power_w: float  # memory power at full bandwidth, on top of the idle power
    # Clocks and voltage
    max_sm_clock_mhz: float
    idle_sm_clock_mhz: float
    clock_step_mhz: float
    mem_clock_mhz: float
    v_min: float  # volts at and below v_knee_mhz
    v_knee_mhz: float
    v_max: float  # volts at max_sm_clock_mhz
    # Leakage: leak_w_ref at v_max and leak_ref_c, doubling every leak_doubling_c
    leak_w_ref: float
    leak_ref_c: float
    leak_doubling_c: float
    # Calibration target: the clock GEMM sustains at the TDP with the die at leak_ref_c;
    # the dynamic power of GEMM is derived from it.
    gemm_clock_at_tdp_mhz: float
    # Throughput
    flop_per_clock: float  # dense bf16 tensor FLOP per SM-clock cycle, whole chip
    gemm_efficiency: float  # achieved / clock-scaled peak for large bf16 GEMM
    mem_bw_b_s: float  # peak memory bandwidth at mem_clock_mhz
    membw_efficiency: float  # achieved / peak for a streaming copy
    train_mfu: float  # model FLOP utilisation of the simulated training step
    # Temperature thresholds (NVML)
    slowdown_temp_c: float
    shutdown_temp_c: float
    max_operating_temp_c: float
    mem_max_temp_c: float
    # Thermal network: die -> heat sink -> air; HBM as a lagged node beside the die
    r_die_sink_k_w: float
    r_sink_air_k_w: float
    c_die_j_k: float
    sink_tau_s: float  # r_sink_air * c_sink
    r_mem_k_w: float  # HBM rise per watt of memory power
    mem_tau_s: float
    # Sensors: the temperature readings change only every temp_refresh_s (both die and HBM)
    temp_refresh_s: float
    pci_bus_ids: tuple[str, ...]
    unsupported: frozenset[str]
    cooling: Cooling = LATE_FANS  # the chassis's fans
    # The power controller holds the board at this share of its enforced limit
    cap_share: float = 1.0

    @property
    def c_sink_j_k(self) -> float:
        return self.sink_tau_s / self.r_sink_air_k_w


# DGX/HGX-style bus ids of an 8-GPU baseboard [assumed: typical HGX H100 enumeration].
HGX_BUS_IDS = (
    "00000000:18:00.0",
    "00000000:2A:00.0",
    "00000000:3A:00.0",
    "00000000:5D:00.0",
    "00000000:9A:00.0",
    "00000000:AB:00.0",
    "00000000:BA:00.0",
    "00000000:DB:00.0",
)

H100_SXM = Sku(
    key="h100-sxm",
    name="NVIDIA H100 80GB HBM3",  # [nvidia-smi] product name
    vendor="nvidia",
    memory_total_b=81559 * 2**20,  # [nvidia-smi] 81559 MiB
    tdp_w=700.0,  # [datasheet] H100 SXM5 max TDP 700 W
    min_power_limit_w=200.0,  # [assumed] the usual H100 SXM minimum limit
    idle_power_w=72.0,  # [nvidia-smi] 70-75 W idle at 345 MHz (a public -q shows 74.7 W)
    hbm_power_w=110.0,  # [assumed] 5 HBM3 stacks at ~20 W each at full bandwidth
    max_sm_clock_mhz=1980.0,  # [nvidia-smi] max SM clock 1980 MHz
    idle_sm_clock_mhz=345.0,  # [nvidia-smi] idle SM clock 345 MHz
    clock_step_mhz=15.0,  # [assumed] NVML's supported-clock table steps by 15 MHz
    mem_clock_mhz=2619.0,  # [nvidia-smi] HBM3 2619 MHz, fixed under load and at idle
    v_min=0.675,  # [nvidia-smi] 675 mV at idle
    v_knee_mhz=900.0,  # [assumed] voltage floor up to ~0.9 GHz, as on most V/f curves
    v_max=1.0,  # [assumed] ~1.0 V at the top boost bin
    leak_w_ref=115.0,  # [assumed] leakage ~16 % of TDP at 65 °C and full voltage
    leak_ref_c=62.0,  # [derived] where the H200's GEMM clock was measured
    leak_doubling_c=35.0,  # [assumed] gives a 2-4 % GEMM loss from cold to hot at the cap
    # [derived] the H200's measured 1455 MHz at the cap (same GH100 die and limit), a bin
    # higher for the ~10 W less HBM power GEMM draws from five stacks than from six
    gemm_clock_at_tdp_mhz=1470.0,
    flop_per_clock=132 * 4096,  # [datasheet] 132 SMs x 4096 = 989.4 TFLOP/s at 1830 MHz
    gemm_efficiency=0.86,  # [derived] the H200's, measured: same die, same kernel
    mem_bw_b_s=3.35e12,  # [datasheet] 3.35 TB/s HBM3
    membw_efficiency=0.90,  # [assumed] stream-style copies reach ~3.0 TB/s
    train_mfu=0.42,  # [assumed] a ~40 % MFU transformer training step
    slowdown_temp_c=89.0,  # [nvidia-smi] GPU Slowdown Temp 89 C
    shutdown_temp_c=92.0,  # [nvidia-smi] GPU Shutdown Temp 92 C
    max_operating_temp_c=87.0,  # [nvidia-smi] GPU Max Operating Temp 87 C
    mem_max_temp_c=95.0,  # [nvidia-smi] Memory Max Operating Temp 95 C
    # [measured] real-traces/h100x8-nanogpt-powercap-voltagepark, from idle (f4f827dd): a
    # die and a heat sink fitted to each GPU's 0.3-s readings against its own power, the
    # medians of 8 GPUs: 0.033 K/W (0.030-0.037) die to sink, 0.027 K/W (0.015-0.037) sink to
    # air, a 28-s sink (21-34 s); 30-45 °C of rise at the cap, settled within ~3-4 min.
    r_die_sink_k_w=0.033,
    r_sink_air_k_w=0.027,
    c_die_j_k=25.0,  # [assumed] die + package: tau ~1 s, as the H200's (measured there)
    sink_tau_s=28.0,
    r_mem_k_w=0.06,  # [assumed] HBM 5-10 K above the sink/die mean under load
    mem_tau_s=30.0,  # [assumed]
    # [measured] real-traces/h100x8-nanogpt-powercap-voltagepark: nvidia-smi polled every
    # ~0.3 s shows new temperatures 0.3 s apart: no refresh lag at 1-s ticks.
    temp_refresh_s=0.3,
    pci_bus_ids=HGX_BUS_IDS,
    unsupported=NVIDIA_SXM_UNSUPPORTED,
    # [measured] nanoGPT from idle: no 30-s mean over the plateau in its 4 min at the cap;
    # after a 400-W phase, 7.5 min at the cap flat within 0.6 °C, and 8 min at 400 W within
    # ±0.3 °C: fans at their speed from the start, a hunt of at most ±0.3 °C.
    cooling=Cooling(hunt_frac=0.016),
    # [measured] nanoGPT at the cap: 689 W of 700 (687-691 per GPU)
    cap_share=0.985,
)

H200 = Sku(
    key="h200",
    name="NVIDIA H200",  # [measured] tests/fixtures/gpu/h200-2026-11-30: nvml_probe.json
    vendor="nvidia",
    memory_total_b=143771 * 2**20,  # [assumed] 143771 MiB (141 GB HBM3e [datasheet])
    tdp_w=700.0,  # [measured] power limit 700 W (nvml_probe.json)
    min_power_limit_w=200.0,  # [assumed] as H100
    # [measured] h200-2026-12-04: 78 W at 345 MHz with the die at 36 °C before the load
    idle_power_w=78.0,
    hbm_power_w=140.0,  # [assumed] 6 stacks, faster interface
    max_sm_clock_mhz=1980.0,  # [measured] reads 1980 MHz when not held (membw, 2026-11-30)
    idle_sm_clock_mhz=345.0,  # [measured] 345 MHz idle (2026-12-04)
    clock_step_mhz=15.0,  # [measured] every clock read is a multiple of 15 MHz
    mem_clock_mhz=3201.0,  # [measured] 3201 MHz under load and at idle
    v_min=0.675,
    v_knee_mhz=900.0,
    v_max=1.0,
    leak_w_ref=115.0,
    leak_ref_c=62.0,  # [measured] the die at the GEMM clock below (61-63 °C)
    leak_doubling_c=35.0,
    # [measured] h200-2026-11-30: GEMM (bf16, n = 12288) holds 1455 MHz (median of 1-Hz
    # reads, 1440-1470) at 690 W, the die at 61-63 °C
    gemm_clock_at_tdp_mhz=1455.0,
    flop_per_clock=132 * 4096,  # [datasheet] 989 TFLOP/s dense bf16, as H100
    gemm_efficiency=0.86,  # [measured] 679 TFLOP/s at 1455 MHz: 0.86 of the clock's peak
    mem_bw_b_s=4.8e12,  # [datasheet] 4.8 TB/s HBM3e
    membw_efficiency=0.90,  # [measured] 4.32 TB/s in soak's membw (2026-11-30)
    train_mfu=0.45,  # [assumed] more bandwidth: a few points more MFU than H100
    slowdown_temp_c=89.0,  # [assumed] as H100
    shutdown_temp_c=92.0,
    max_operating_temp_c=87.0,
    mem_max_temp_c=95.0,
    # [measured] a die and a heat sink fitted to the 1-Hz readings against the recorded
    # power: h200-2026-12-04 (mix, from 36 °C, its first 7.5 min) 0.032 K/W die to sink,
    # 0.0073 K/W sink to air, a 49-s sink; h200-2026-11-30 (gemm, 45 s) 0.036, 0.0088 and
    # 53 s. The die rises ~20 °C within seconds of the load and the sink ~5 °C more within
    # ~2 min: 36 -> 57 °C in the first minute, as recorded. The sink here is 40 s: with the
    # late fans below warming its air too, 50 s reached less of the rise in the first
    # minute than recorded (docs/simulator.md's table).
    r_die_sink_k_w=0.032,
    r_sink_air_k_w=0.008,
    c_die_j_k=25.0,  # [measured] 40 -> 58 °C within the first second of GEMM: tau < 1 s
    sink_tau_s=40.0,
    r_mem_k_w=0.06,
    mem_tau_s=30.0,
    temp_refresh_s=0.3,  # [assumed] as H100
    pci_bus_ids=HGX_BUS_IDS,
    unsupported=NVIDIA_SXM_UNSUPPORTED,
    # [measured, once] h200-2026-12-04: no overshoot in the first minutes (30-s means 59.1-
    # 60.4 °C from 1 to 7.5 min), then at 8 min the die fell 1.5 °C within a minute and the
    # HBM 1 °C, at the same power: fans (or coolant) stepping up late, 1.5 °C of the sink's
    # 5.5 °C rise (its resistance 35 % over its final value until then). One event in 11
    # min: no period of a hunt can be measured; the hunt is assumed as small as the H100's.
    cooling=Cooling(idle_excess=0.35, delay_s=450.0, lag_s=20.0, hunt_frac=0.05),
    # [measured] 690 W median of 700 under gemm (2026-11-30) and under mix (2026-12-04)
    cap_share=0.985,
)

A100_SXM = Sku(
    key="a100-sxm",
    name="NVIDIA A100-SXM4-80GB",  # [nvidia-smi] product name
    vendor="nvidia",
    memory_total_b=81920 * 2**20,  # [nvidia-smi] 81920 MiB
    tdp_w=400.0,  # [datasheet] A100 SXM4 400 W
    min_power_limit_w=100.0,  # [nvidia-smi] min power limit 100 W
    idle_power_w=55.0,  # [nvidia-smi] 52-60 W idle at 210 MHz
    hbm_power_w=60.0,  # [assumed] 5 HBM2e stacks at ~12 W
    max_sm_clock_mhz=1410.0,  # [datasheet] boost 1410 MHz
    idle_sm_clock_mhz=210.0,  # [nvidia-smi] idle SM clock 210 MHz
    clock_step_mhz=15.0,
    mem_clock_mhz=1593.0,  # [nvidia-smi] HBM2e 1593 MHz (80 GB part)
    v_min=0.706,  # [nvidia-smi] 706 mV at idle
    v_knee_mhz=700.0,  # [assumed]
    v_max=1.0,  # [assumed]
    leak_w_ref=55.0,  # [assumed] ~14 % of TDP at 65 °C
    leak_ref_c=65.0,
    leak_doubling_c=35.0,
    gemm_clock_at_tdp_mhz=1305.0,  # [measured] the clock NVIDIA's HPL Rpeak assumes at 400 W
    flop_per_clock=108 * 2048,  # [datasheet] 108 SMs x 2048 = 312 TFLOP/s at 1410 MHz
    gemm_efficiency=0.86,  # [assumed] bf16 GEMM ~240-270 TFLOP/s at the cap
    mem_bw_b_s=2.039e12,  # [datasheet] 2,039 GB/s
    membw_efficiency=0.90,
    train_mfu=0.45,
    slowdown_temp_c=89.0,  # [nvidia-smi] 89 C
    shutdown_temp_c=92.0,  # [nvidia-smi] 92 C
    max_operating_temp_c=85.0,  # [nvidia-smi] 85 C
    mem_max_temp_c=95.0,  # [nvidia-smi] 95 C
    r_die_sink_k_w=0.032,  # [assumed] die 13 K above the sink at 400 W
    r_sink_air_k_w=0.065,  # [assumed] sink 26 K above its air at 400 W
    c_die_j_k=40.0,
    sink_tau_s=140.0,
    r_mem_k_w=0.10,
    mem_tau_s=30.0,
    # [assumed] no trace of an A100 at hand: between H100 (0.3 s) and a V100 read through
    # nvidia-smi -l 5 (real-traces/v100x4-gpuburn-18h-lambda: ~5 s).
    temp_refresh_s=2.0,
    pci_bus_ids=(
        "00000000:07:00.0",  # [assumed] DGX A100-style enumeration
        "00000000:0F:00.0",
        "00000000:47:00.0",
        "00000000:4E:00.0",
        "00000000:87:00.0",
        "00000000:90:00.0",
        "00000000:B7:00.0",
        "00000000:BD:00.0",
    ),
    unsupported=NVIDIA_SXM_UNSUPPORTED,
)

MI300X = Sku(
    key="mi300x",
    name="AMD Instinct MI300X",  # [datasheet]
    vendor="amd",
    memory_total_b=192 * 2**30,  # [datasheet] 192 GB HBM3
    tdp_w=750.0,  # [datasheet] 750 W peak board power
    min_power_limit_w=400.0,  # [assumed]
    idle_power_w=130.0,  # [assumed] eight HBM3 stacks and a large interposer
    hbm_power_w=160.0,  # [assumed]
    max_sm_clock_mhz=2100.0,  # [datasheet] peak engine clock 2100 MHz
    idle_sm_clock_mhz=132.0,  # [assumed]
    clock_step_mhz=10.0,  # [assumed]
    mem_clock_mhz=1300.0,  # [derived] 5.3 TB/s over 8192 bits: 5.2 Gbps per pin, 1.3 GHz
    v_min=0.70,  # [assumed]
    v_knee_mhz=900.0,
    v_max=1.0,
    leak_w_ref=95.0,  # [assumed] calibrated like H100: a healthy part loses 2-4 % cold to hot
    leak_ref_c=65.0,
    leak_doubling_c=35.0,
    gemm_clock_at_tdp_mhz=1700.0,  # [assumed] heavily power-bound at 750 W
    flop_per_clock=304 * 2048,  # [datasheet] 304 CUs x 2048 = 1307 TFLOP/s at 2100 MHz
    gemm_efficiency=0.62,  # [assumed] bf16 GEMM ~550-650 TFLOP/s at the cap
    mem_bw_b_s=5.3e12,  # [datasheet] 5.3 TB/s
    membw_efficiency=0.80,  # [assumed] ~4.2 TB/s in stream-style copies
    train_mfu=0.35,
    slowdown_temp_c=100.0,  # [assumed] junction (hotspot) throttle
    shutdown_temp_c=105.0,  # [assumed]
    max_operating_temp_c=95.0,  # [assumed]
    mem_max_temp_c=95.0,  # [assumed]
    r_die_sink_k_w=0.020,
    r_sink_air_k_w=0.034,
    c_die_j_k=70.0,
    sink_tau_s=160.0,
    r_mem_k_w=0.05,
    mem_tau_s=30.0,
    temp_refresh_s=1.0,  # [assumed] amdsmi reads the SMU metrics table, refreshed often
    pci_bus_ids=(
        "0000:05:00.0",
        "0000:26:00.0",
        "0000:46:00.0",
        "0000:65:00.0",
        "0000:85:00.0",
        "0000:A6:00.0",
        "0000:C6:00.0",
        "0000:E5:00.0",
    ),
    unsupported=AMD_OAM_UNSUPPORTED,
)

SKUS: dict[str, Sku] = {s.key: s for s in (H100_SXM, H200, A100_SXM, MI300X)}
DEFAULT_SKU = H100_SXM.key


@dataclass(frozen=True, slots=True)
class Part:
    """One part of a workload and its share of the device's time."""

    name: str
    unit: str
    share: float


@dataclass(frozen=True, slots=True)
class Ripple:
    """What a workload's sub-second variation does to one 1-Hz reading (one sigma): the
    clock a power or thermal limit holds (relative; spread evenly, as measured), the 1-s
    power (relative) and the die temperature (°C). The means are the physics'; each
    reading scatters about them independently, but for the share ``temp_cycle_share`` of
    the die's variance that follows the workload's rounds, a cycle of ``temp_cycle_s``."""

    clock: float = 0.0
    power: float = 0.0
    temp_c: float = 0.0
    temp_cycle_s: float = 11.0
    temp_cycle_share: float = 0.0


@dataclass(frozen=True, slots=True)
class Workload:
    """How a workload loads a device: how much switching activity (relative to a dense
    GEMM, which is 1.0) and how much of the memory's full-bandwidth power it draws, its
    ripple, and how long its activity takes to build up from the load's start."""

    name: str
    core_activity: float
    mem_power_frac: float
    mem_util_pct: float
    parts: tuple[Part, ...]
    ripple: Ripple = Ripple()
    ramp_s: float = 0.0


# [measured] H200 (tests/fixtures/gpu/), 1-Hz reads at the cap. GEMM alone: the clock
# 1440-1470 MHz, sd 1.3 %; the power and the die as quiet as their sensors (sd 1.8 W,
# 0.25 °C from one read to the next). The mix: the clock spread evenly over 1350-1960 MHz,
# sd 10.8 %, lag-1 correlation 0.04; the 1-s power 1.0 % (robust sd; a few dips to 500-600 W
# where its parts' rounds meet, not simulated); the die 2.7 °C, its correlation 0.17 at
# one read's distance and -0.09 to -0.14 at 3 to 7 (the power's 0.45 at 11 s: the mix's
# rounds), so that its 30-s medians scatter only 0.5 °C: 40 % of its variance in an 11-s
# cycle, the rest from read to read (which puts the 30-s medians' scatter at the recorded
# 0.5 °C; the lag-1 correlation it gives, 0.37, is higher than the recorded 0.17-0.25).
# Training: the die [measured, H100 nanoGPT] 0.4-0.7
# °C from one 0.3-s read to the next, the power as quiet as its sensor; its clock [assumed]
# between GEMM's and the mix's.
GEMM_RIPPLE = Ripple(clock=0.013)
MIX_RIPPLE = Ripple(clock=0.108, power=0.010, temp_c=2.7, temp_cycle_share=0.4)
TRAIN_RIPPLE = Ripple(clock=0.05, temp_c=0.4)

WORKLOADS: dict[str, Workload] = {
    # [assumed] GEMM: tensor cores flat out, operands mostly from cache: some HBM traffic.
    # [measured] capped from its first read (h200-2026-11-30): no build-up.
    "gemm": Workload("gemm", 1.0, 0.35, 25.0, (Part("gemm", "FLOP", 1.0),), GEMM_RIPPLE),
    # [assumed] streaming copy: HBM at full power, SMs mostly waiting: well under the cap,
    # so the clocks stay at their maximum [measured: 1980 MHz, 647 W on the H200].
    "membw": Workload("membw", 0.25, 1.0, 95.0, (Part("membw", "B", 1.0),)),
    # [assumed] a training step: GEMMs plus element-wise and attention kernels.
    "train": Workload("train", 0.78, 0.6, 55.0, (Part("train", "token", 1.0),), TRAIN_RIPPLE),
    # [assumed] synchronous data-parallel training: the train load, in lock-step (sim/lockstep.py).
    "ddp": Workload("ddp", 0.78, 0.6, 55.0, (Part("ddp", "token", 1.0),), TRAIN_RIPPLE),
    # [measured] all three at once on their own streams: less switching than GEMM alone (the
    # H200 holds 1654 MHz at the cap under the mix against 1455 under GEMM), HBM busy
    # [assumed]; its parts take ~2.5 s to build up [measured: the clock reads 1920 and 1905
    # MHz in the first two seconds, the power reaches the cap in the third].
    "mix": Workload(
        "mix",
        0.65,
        0.9,
        70.0,
        (Part("gemm", "FLOP", 0.5), Part("membw", "B", 0.2), Part("train", "token", 0.3)),
        MIX_RIPPLE,
        ramp_s=2.5,
    ),
}

# Training step: tokens/s = train_mfu x (clock-scaled peak FLOP/s) / TRAIN_FLOP_PER_TOKEN,
# with TRAIN_SM_WEIGHT of the step bound by the SM clock and the rest by the memory clock.
TRAIN_FLOP_PER_TOKEN = 6 * 1.3e9  # [assumed] a 1.3 B-parameter transformer: 6 N FLOP/token
TRAIN_SM_WEIGHT = 0.8  # [assumed]


@dataclass(frozen=True, slots=True)
class Chassis:
    """The server around the accelerators: air, fans, layout, sensors, activity."""

    inlet_c: float = 25.0  # [assumed] cold-aisle air; ASHRAE A1 recommends 18-27 °C
    inlet_drift_c: float = 0.6  # [assumed] slow room drift amplitude (HVAC cycle)
    inlet_period_s: tuple[float, float] = (2.5 * 3600, 4.0 * 3600)  # drawn per seed
    fan_cycle_c: float = 0.25  # [assumed] chassis-fan speed steps seen as air temperature
    fan_period_s: float = 240.0  # [assumed]
    # Rear-row GPUs breathe the front row's exhaust: preheat = k x upstream heat flow.
    preheat_k_w: float = 0.008  # [assumed] 700 W upstream -> ~5.6 K warmer air
    idle_activity: float = 0.02  # [assumed] housekeeping switching at idle
    max_substep_s: float = 2.0  # physics substep: governor decides at least this often
    verify_interval_s: float = 10.0  # [assumed] a result check per part every 10 s
    prefetch_s: float = 12.0  # [assumed] input queue depth, in seconds of full-rate work
    temp_noise_c: float = 0.2  # [assumed] sensor noise before quantising to whole °C
    # [measured] NVML's 1-s power reading at a steady cap: sd 1.7 W at 690 W (H200 gemm,
    # 2026-11-30), 1.7-2.7 W (H100 nanoGPT, 0.3-s reads)
    power_noise_frac: float = 0.002
    power_noise_w: float = 0.5
    # Work-rate noise of a 1-s work sample (shrinking as 1/sqrt(seconds) for longer ones):
    # scale x Student-t with work_noise_dof degrees of freedom (None: normal), clipped at
    # +-work_noise_clip. [measured] gpu-burn's per-report (~1.9 s) Gflop/s on 4 V100s over
    # 18 h (real-traces/v100x4-gpuburn-18h-lambda): robust sigma ~0.8 %, 1 % / 99 %
    # quantiles about -6 % / +6 %, 0.1 % / 99.9 % about -15 % / +20..30 %, excess kurtosis
    # 40-60. A t with 2 degrees of freedom at 1 % scale gives ~1 %, +-5 %, +-16 % at 2 s.
    work_noise_frac: float = 0.01
    work_noise_dof: float | None = 2.0
    work_noise_clip: float = 0.4  # [assumed] no sample is off by more than 40 %
    # Sensor refresh: temperature readings change only every Sku.temp_refresh_s (False:
    # every reading is fresh).
    temp_refresh: bool = True
    # The chassis's fans as each SKU's ``Cooling`` has them (False: fans that neither lag
    # nor hunt).
    fans: bool = True
    # The load's sub-second ripple in the readings, as each ``Workload`` has it (False: none).
    ripple: bool = True
    efficiency_spread: float = 0.015  # [assumed] silicon lottery: dynamic power, 1 sigma
    leakage_spread: float = 0.08  # [assumed] silicon lottery: leakage, 1 sigma
    energy_offset_j: tuple[float, float] = (3.6e7, 3.6e8)  # counter since driver load


CHASSIS = Chassis()
# The ideal sensors of earlier versions: readings fresh every tick, normal work-rate noise of
# 0.3 %, fans that neither lag nor hunt, no sub-second ripple of the load. For tests that
# need them.
IDEAL_CHASSIS = replace(
    CHASSIS,
    work_noise_frac=0.003,
    work_noise_dof=None,
    temp_refresh=False,
    fans=False,
    ripple=False,
)
# The sensors a run asks for by name (``RunConfig.sim_sensors``).
SENSORS: dict[str, Chassis] = {"real": CHASSIS, "ideal": IDEAL_CHASSIS}
