"""Pure functions over stored series: equilibrium, windows, checks, verdict, diagnosis."""

from soak.analysis.analyze import Analysis, DeviceResult, RunData, analyze, analyze_run

__all__ = ["Analysis", "DeviceResult", "RunData", "analyze", "analyze_run"]
