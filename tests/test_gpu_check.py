"""tools/gpu_check.py's clock study, against a stand-in for pynvml whose clock dithers from
one read to the next as an H200's did at its power cap (2026-12-04)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))

import gpu_check


class _NVMLError(Exception):
    pass


def _pynvml(samples: bool) -> SimpleNamespace:
    rng = np.random.default_rng(3)
    driver = [  # the driver's own record: one sample every 20 ms, in µs
        SimpleNamespace(timeStamp=1_000_000 + 20_000 * k, sampleValue=SimpleNamespace(uiVal=v))
        for k, v in enumerate((1500, 1800, 1600, 1700))
    ]

    older = SimpleNamespace(timeStamp=999_000, sampleValue=SimpleNamespace(uiVal=900))

    def get_samples(handle, kind, last_seen):
        if not samples:
            raise _NVMLError("Not Supported")
        assert kind == 5
        if last_seen == 0:  # the first call: what the driver kept before the study
            return 1, [older]
        return 1, [s for s in driver if s.timeStamp > last_seen]

    return SimpleNamespace(
        NVML_PROCESSOR_CLK_SAMPLES=5,
        NVML_CLOCK_SM=1,
        NVMLError=_NVMLError,
        nvmlDeviceGetHandleByIndex=lambda index: "h0",
        nvmlDeviceGetClockInfo=lambda handle, kind: int(15 * round(rng.normal(1650, 180) / 15)),
        nvmlDeviceGetSamples=get_samples,
    )


def test_fast_reads_show_what_averaging_within_a_tick_would_gain():
    study = gpu_check.clock_study(_pynvml(samples=True), seconds=2.2, every_s=0.004)
    reads = study["reads"]
    assert reads["n"] > 100 and reads["mean_mhz"] == pytest.approx(1650, abs=40)
    assert reads["sd_mhz"] == pytest.approx(180, rel=0.2)
    assert abs(reads["lag1_corr"]) < 0.3  # white: no read predicts the next
    assert reads["one_s_mean_sd"] < reads["sd_mhz"] / 3  # averaged within each second
    assert len(reads["mhz"]) == reads["n"]
    samples = study["samples"]
    assert samples["n"] == 4 and samples["median_spacing_s"] == pytest.approx(0.02)
    assert samples["mean_mhz"] == 1650.0


def test_a_driver_without_clock_samples_says_so_and_the_reads_still_count():
    study = gpu_check.clock_study(_pynvml(samples=False), seconds=0.5, every_s=0.01)
    assert study["samples"] == {"error": "Not Supported"}
    assert study["reads"]["n"] > 10


def test_the_study_line_says_not_available_where_too_few_reads_say():
    study = {"every_s": 0.01, "samples": {"error": "Not Supported"}}
    study["reads"] = {"n": 1, "mean_mhz": 1650.0, "sd_mhz": None, "one_s_mean_sd": None,
                      "one_read_per_s_sd": None}  # fmt: skip
    line = gpu_check._study_line(study)
    assert line.startswith("1 reads every 10 ms, mean 1650 MHz, sd n/a; 1-s means sd n/a")
    assert line.endswith("driver samples: Not Supported")
