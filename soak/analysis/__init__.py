"""Pure functions over stored series: equilibrium, windows, checks, verdict, diagnosis."""

from soak.analysis.analyze import Analysis, DeviceResult, analyze

__all__ = ["Analysis", "DeviceResult", "analyze"]
