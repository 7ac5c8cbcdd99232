"""soak: a burn-in soak benchmark for GPU servers that compares cold and hot."""

__version__ = "0.1.0"
