"""soak's own exceptions. Vendor errors are translated into these at the backend boundary."""


class SoakError(Exception):
    """Base of soak's errors."""


class ConfigError(SoakError):
    """Bad input from the operator: a flag, a profile, a fault spec. Exit code 2."""


class BackendUnavailable(SoakError):
    """The asked-for backend cannot run here (no driver, no library, no device). Exit code 2."""


class GpuLost(SoakError):
    """A device stopped answering (NVML 'GPU is lost', XID 79)."""

    def __init__(self, device: int, message: str = "GPU is lost") -> None:
        super().__init__(f"device {device}: {message}")
        self.device = device


class NotSupported(SoakError):
    """The device or driver does not support a query."""


class NoPermission(SoakError):
    """The query needs privileges soak does not have."""


class FunctionMissing(SoakError):
    """The vendor library or driver lacks the function."""


class StoreError(SoakError):
    """The run store cannot be written or read (disk full, not a run folder)."""


class BmcUnavailable(SoakError):
    """The BMC cannot give an inlet temperature: it refused the login, timed out, or lists no
    inlet sensor. The soak goes on without headroom; the message is the one line shown."""
