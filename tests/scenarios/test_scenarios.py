"""The scenario corpus (scenarios.toml): simulated servers with faults, seeds, SKUs and run
lengths, each run through the runner and the store and judged; every verdict, diagnosis and
failing check must be the expected one."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from soak.analysis.checks import Status
from soak.pipeline import analyze
from soak.profile import Profile, load_profile
from soak.runner import run
from soak.store import RunStore
from tests.factories import sim_config

HERE = Path(__file__).parent
CORPUS = tomllib.loads((HERE / "scenarios.toml").read_text())["scenario"]


@dataclass(frozen=True)
class Expected:
    verdict: str
    diagnosis: str = "healthy"
    checks: tuple[str, ...] = ()


@dataclass(frozen=True)
class Scenario:
    name: str
    about: str
    sku: str
    gpus: int
    seed: int
    workload: str
    minutes: float
    verdict: str
    faults: tuple[str, ...] = ()
    profile: str = "default"
    until_steady: bool = False
    stop: str | None = None
    warns: tuple[str, ...] = ()
    devices: dict[int, Expected] = field(default_factory=dict)
    sensors: str = "real"  # the sim's sensors: "real", or "ideal" where a scenario needs them

    @classmethod
    def from_table(cls, table: dict) -> Scenario:
        table = dict(table)
        devices = {
            int(index): Expected(**(want | {"checks": tuple(want.get("checks", ()))}))
            for index, want in table.pop("devices", {}).items()
        }
        for key in ("faults", "warns"):
            table[key] = tuple(table.get(key, ()))
        return cls(**table, devices=devices)

    def expected(self, index: int) -> Expected:
        return self.devices.get(index, Expected("PASS"))

    def load_profile(self) -> Profile:
        local = HERE / "profiles" / self.profile
        return load_profile(str(local) if local.exists() else self.profile)


SCENARIOS = [Scenario.from_table(t) for t in CORPUS]


def _lost(analysis, index: int) -> bool:
    return any(d.facts.lost for d in analysis.devices if d.index == index)


def test_the_corpus_is_well_formed():
    names = [s.name for s in SCENARIOS]
    assert len(names) == len(set(names)) >= 20
    for s in SCENARIOS:
        assert all(0 <= i < s.gpus for i in s.devices), s.name
        verdicts = {e.verdict for e in s.devices.values()}
        worst = next((v for v in ("FAIL", "INCOMPLETE") if v in verdicts), "PASS")
        assert s.verdict == worst, s.name
    kinds = {f.split(":")[0] for s in SCENARIOS for f in s.faults}
    assert kinds >= {"airflow", "power-cap", "hw-slowdown", "power-brake", "ecc", "xid", "sdc"}
    assert kinds >= {"stall", "inlet", "slow", "leaky"}
    assert {s.sku for s in SCENARIOS} == {"h100-sxm", "h200", "a100-sxm", "mi300x"}


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_scenario(scenario: Scenario, tmp_path):
    profile = scenario.load_profile()
    config = sim_config(
        tmp_path,
        workload=scenario.workload,
        duration_s=scenario.minutes * 60,
        until_steady=scenario.until_steady,
        seed=scenario.seed,
        sim_gpus=scenario.gpus,
        sim_sku=scenario.sku,
        sim_faults=scenario.faults,
        sim_sensors=scenario.sensors,
        profile=profile,
    )
    result = run(config)
    store = RunStore.open(result.run_dir)
    try:
        analysis = analyze(store, profile)
    finally:
        store.close_read()

    got = {
        d.index: (
            d.verdict,
            d.diagnosis,
            sorted({c.check for c in d.checks if c.status is Status.FAIL}),
        )
        for d in analysis.devices
    }
    for d in analysis.devices:
        want = scenario.expected(d.index)
        verdict, diagnosis, failing = got[d.index]
        assert (verdict, diagnosis) == (want.verdict, want.diagnosis), (d.index, got)
        assert set(want.checks) <= set(failing), (d.index, got)
        if want.verdict == "PASS":
            assert d.diagnosis_evidence == ()
        else:
            assert d.diagnosis_evidence, "a failing device's diagnosis gives its evidence"
        for check in scenario.warns:
            assert any(c.check == check and c.status is Status.WARN for c in d.checks), check
    assert analysis.verdict == scenario.verdict
    # One rule: the runner's online detector found the time the offline pass finds (None
    # where its last word was a withdrawal, and the offline pass has no date either).
    online = {e.device: e.details["time_s"] for e in analysis.events if e.kind == "equilibrium"}
    offline = {d.index: d.facts.equilibrium.time_s for d in analysis.devices}
    assert online == {i: offline[i] for i in online}
    assert set(online) >= {
        i for i, t in offline.items() if t is not None and not _lost(analysis, i)
    }
    if scenario.stop:
        assert result.stop_reason == scenario.stop
    if scenario.until_steady and scenario.stop == "steady":
        assert analysis.stop is not None and analysis.stop.duration_s is not None
        assert analysis.stop.duration_s < 0.6 * scenario.minutes * 60
