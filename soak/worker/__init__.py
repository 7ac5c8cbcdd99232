"""Worker processes: ``child`` (the process that runs a workload on one device), ``pool``
(``WorkerPool``, the ``Load`` of real backends) and ``ranks`` (the process group of a
synchronous load)."""

from soak.worker.child import classify_exception
from soak.worker.pool import WorkerPool, odd_checksums
from soak.worker.ranks import free_port

__all__ = ["WorkerPool", "classify_exception", "free_port", "odd_checksums"]
