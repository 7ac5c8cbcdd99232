"""Pure functions over a run's dataset: equilibrium, windows, checks, verdict, diagnosis."""

from soak.analysis.analyze import Analysis, DeviceResult, analyze_run

__all__ = ["Analysis", "DeviceResult", "analyze_run"]
