"""One capability scenario run through both vendor backends: the probe means the same thing
for NVML and amdsmi (`soak.devices.common` says what "supported" means).

The scenario, per metric of GPU 0: one read answers, one raises NotSupported, one answers the
vendor's sentinel, one needs a permission soak lacks, one is missing from the binding, and one
answers a sentinel where a second way answers a value. GPU 1 stops answering during its probe;
GPU 2 is healthy. Each fake realises the scenario in its own vendor's terms.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from soak.devices.amd import AmdBackend
from soak.devices.nvml import NvmlBackend
from soak.model import Capability, EventKind
from tests.devices import fake_amdsmi, fake_pynvml
from tests.devices.conftest import by_device

SUPPORTED, NOT_SUPPORTED = Capability.SUPPORTED, Capability.NOT_SUPPORTED

# metric of GPU 0 → its capability, whichever the vendor.
EXPECTED = {
    "temp_c": SUPPORTED,  # answers a value
    "fan_pct": NOT_SUPPORTED,  # raises NotSupported
    "mem_temp_c": NOT_SUPPORTED,  # answers a sentinel: no reading, so not supported
    "ecc_uncorrected": Capability.NO_PERMISSION,
    "pcie_replay": Capability.MISSING,  # the binding has no function for it
    "power_w": SUPPORTED,  # a sentinel, then a second way with a value
}


@dataclass(frozen=True)
class Vendor:
    """How one binding shows the scenario."""

    gpu0: dict[str, Any]  # GPU 0's answers that differ from a healthy GPU
    lost_in_probe: dict[str, Any]  # answers of a GPU that stops answering, liveness read too
    hidden: frozenset[str]  # functions and constants the binding lacks


FI = "nvmlDeviceGetFieldValues"
NVML = Vendor(
    gpu0={
        "nvmlDeviceGetFanSpeed()": fake_pynvml.err("NotSupported"),
        f"{FI}(NVML_FI_DEV_MEMORY_TEMP)": fake_pynvml.fv(0, 1),  # 0 °C: no sensor
        f"{FI}(NVML_FI_DEV_ECC_DBE_VOL_TOTAL)": fake_pynvml.err("NoPermission"),
        "nvmlDeviceGetTotalEccErrors(NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC)": (
            fake_pynvml.err("NoPermission")
        ),
        "nvmlDeviceGetPowerUsage()": 0xFFFF_FFFF,  # then the POWER_AVERAGE field answers
    },
    lost_in_probe={
        "nvmlDeviceGetPowerUsage()": fake_pynvml.err("Unknown"),
        "nvmlDeviceGetClockInfo(NVML_CLOCK_SM)": fake_pynvml.err("Unknown"),
    },
    hidden=frozenset({"nvmlDeviceGetPcieReplayCounter", "NVML_FI_DEV_PCIE_REPLAY_COUNTER"}),
)

NA = fake_amdsmi.NA
AMD_TEMP = "amdsmi_get_temp_metric"
AMD_METRICS = "amdsmi_get_gpu_metrics_info()"
AMD = Vendor(
    gpu0={
        "amdsmi_get_gpu_fan_speed(0)": fake_amdsmi.err("NOT_SUPPORTED"),
        f"{AMD_TEMP}(AmdSmiTemperatureType.VRAM, AmdSmiTemperatureMetric.CURRENT)": 0xFFFF,
        AMD_METRICS: {**fake_amdsmi.baseline_gpu(0)[AMD_METRICS], "temperature_mem": NA},
        "amdsmi_get_gpu_total_ecc_count()": fake_amdsmi.err("NO_PERM"),
        "amdsmi_get_power_info()": {  # every key N/A; then gpu_metrics answers
            "socket_power": NA,
            "current_socket_power": NA,
            "average_socket_power": NA,
            "power_limit": 750,
        },
    },
    lost_in_probe={
        "amdsmi_get_power_info()": fake_amdsmi.err("IO"),
        "amdsmi_get_gpu_activity()": fake_amdsmi.err("IO"),
    },
    hidden=frozenset({"amdsmi_get_gpu_pci_replay_counter", "amdsmi_get_pcie_info"}),
)


def open_nvml(monkeypatch: pytest.MonkeyPatch, closing) -> NvmlBackend:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    tables = [fake_pynvml.baseline_gpu(i) for i in range(3)]
    tables[0].update(NVML.gpu0)
    tables[1].update(NVML.lost_in_probe)
    fake = fake_pynvml.FakeNvml(tables, hidden=NVML.hidden)
    monkeypatch.setattr("soak.devices.nvml.pynvml", fake)
    return closing(NvmlBackend(watch_events=False))


def open_amd(monkeypatch: pytest.MonkeyPatch, closing) -> AmdBackend:
    monkeypatch.delenv("ROCR_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("HIP_VISIBLE_DEVICES", raising=False)
    tables = [fake_amdsmi.baseline_gpu(i) for i in range(3)]
    tables[0].update(AMD.gpu0)
    tables[1].update(AMD.lost_in_probe)
    fake = fake_amdsmi.FakeAmdSmi(tables, hidden=AMD.hidden)
    monkeypatch.setattr("soak.devices.amd.amdsmi", fake)
    return closing(AmdBackend())


def outcomes(backend: NvmlBackend | AmdBackend) -> dict[str, Any]:
    """What the scenario came to, in vendor-neutral terms."""
    caps = backend.capabilities()
    gpu0 = by_device(backend.sample(1.0))
    return {
        "gpu0": {m: caps[0][m] for m in EXPECTED},
        "gpu0 readable": {m: getattr(gpu0[0], m) is not None for m in EXPECTED},
        "gpu2 pcie_replay": caps[2]["pcie_replay"],
        "gpu1 caps": caps[1],
        "gpu1 torch_device": backend.devices()[1].torch_device,
        "sampled": sorted(gpu0),
        "events": [(e.kind, e.device, e.t_s) for e in backend.poll_events(1.0)],
    }


EXPECTED_OUTCOMES = {
    "gpu0": EXPECTED,
    "gpu0 readable": {m: cap is SUPPORTED for m, cap in EXPECTED.items()},
    "gpu2 pcie_replay": Capability.MISSING,
    "gpu1 caps": {},
    "gpu1 torch_device": None,
    "sampled": [0, 2],
    "events": [(EventKind.DEVICE_LOST, 1, 0.0)],
}


@pytest.mark.parametrize("opener", [open_nvml, open_amd], ids=["nvml", "amd"])
def test_one_capability_table_means_the_same_on_every_vendor(monkeypatch, closing, opener):
    assert outcomes(opener(monkeypatch, closing)) == EXPECTED_OUTCOMES


def test_both_backends_come_to_the_same_outcomes(monkeypatch, closing) -> None:
    assert outcomes(open_nvml(monkeypatch, closing)) == outcomes(open_amd(monkeypatch, closing))
