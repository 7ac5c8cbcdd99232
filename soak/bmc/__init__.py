"""The server's BMC: inlet and chassis temperatures, probed once and sampled every 10 s.

One module per way to reach it (``ipmi``: ipmitool in-band or over LAN; ``redfish``: DMTF's
client library) behind the small ``Bmc`` protocol (``base``); ``open_bmc`` picks one from
the options and says which. The password comes only from ``SOAK_BMC_PASSWORD`` or a
password file, and is never stored: not in the run record, the report or summary.json.

This package imports nothing from ``cli``, ``report``, ``runner`` or ``devices``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from soak.bmc.base import Bmc, BmcProbe, Sensor, ServerSensors, choose_inlet
from soak.errors import BmcUnavailable, ConfigError

__all__ = [
    "BMC_PROTOCOLS",
    "Bmc",
    "BmcOptions",
    "BmcProbe",
    "NoBmc",
    "Sensor",
    "ServerSensors",
    "choose_inlet",
    "open_bmc",
]

BMC_PROTOCOLS = ("redfish", "ipmi")
PASSWORD_ENV = "SOAK_BMC_PASSWORD"
IN_BAND_DEVICES = ("/dev/ipmi0", "/dev/ipmi/0", "/dev/ipmidev/0")


@dataclass(frozen=True, slots=True)
class BmcOptions:
    """How to reach the BMC (``soak run --bmc ...``); no password here: it is read when the
    BMC is opened, from the environment or the file."""

    host: str | None = None  # None: in-band IPMI where the server has it
    protocol: str = "redfish"
    port: int | None = None  # None: 443 (Redfish over https), 623 (IPMI)
    user: str = "admin"
    password_file: Path | None = None
    insecure: bool = False
    ca_file: Path | None = None
    inlet_sensor: str | None = None
    ipmi_auth: str | None = None  # ipmitool -A (e.g. MD5) where the BMC needs one

    def __post_init__(self) -> None:
        """How to reach a BMC only with a BMC to reach, and the files named there."""
        if self.host is None:
            given = [
                name
                for name in ("port", "password_file", "ca_file", "ipmi_auth")
                if getattr(self, name) is not None
            ]
            if given or self.insecure:
                flag = "--bmc-" + (given[0] if given else "insecure").replace("_", "-")
                raise ConfigError(f"{flag}: only with --bmc HOST")
        if self.protocol not in BMC_PROTOCOLS:
            known = ", ".join(BMC_PROTOCOLS)
            raise ConfigError(f"--bmc-protocol: {self.protocol!r} is not one of {known}")
        files = (("--bmc-password-file", self.password_file), ("--bmc-ca-file", self.ca_file))
        for flag, path in files:
            if path is not None and not path.is_file():
                raise ConfigError(f"{flag} {path}: no such file")


class NoBmc:
    """No BMC to read: every read says why."""

    def __init__(self, reason: str, source: str = "no BMC") -> None:
        self.reason, self.source = reason, source

    def temperatures(self) -> list[Sensor]:
        raise BmcUnavailable(self.reason)

    def close(self) -> None:
        """Nothing to release."""


def read_password(options: BmcOptions, env: Mapping[str, str]) -> str:
    """The password, from ``--bmc-password-file`` (first line) or SOAK_BMC_PASSWORD."""
    if options.password_file is not None:
        try:
            text = options.password_file.read_text()
        except OSError as exc:
            raise ConfigError(
                f"--bmc-password-file {options.password_file}: cannot read ({exc.strerror})"
            ) from exc
        lines = text.splitlines()
        if not lines or not lines[0]:
            raise ConfigError(f"--bmc-password-file {options.password_file}: empty")
        return lines[0]
    password = env.get(PASSWORD_ENV)
    if not password:
        raise ConfigError(
            f"--bmc {options.host}: no password (set {PASSWORD_ENV} or give --bmc-password-file)"
        )
    return password


def _redfish_url(host: str, port: int | None) -> str:
    if "://" in host:
        return host if port is None else f"{host.rstrip('/')}:{port}"
    return f"https://{host}" + (f":{port}" if port is not None else "")


def open_bmc(options: BmcOptions, env: Mapping[str, str] | None = None) -> Bmc:
    """The BMC the options name; ConfigError (exit 2) for bad options, and a ``NoBmc`` that
    says why where none can be reached (the soak goes on without an inlet)."""
    env = os.environ if env is None else env
    if options.protocol not in BMC_PROTOCOLS:
        raise ConfigError(
            f"--bmc-protocol: unknown {options.protocol!r} (choose from {', '.join(BMC_PROTOCOLS)})"
        )
    if options.host is None:
        found = next((d for d in IN_BAND_DEVICES if os.path.exists(d)), None)
        if found is None:
            return NoBmc("no BMC given (--bmc HOST) and no in-band IPMI device (/dev/ipmi0)")
        from soak.bmc.ipmi import IpmiTool

        try:
            return IpmiTool()
        except BmcUnavailable as exc:
            return NoBmc(str(exc), "ipmitool (in-band)")
    password = read_password(options, env)
    try:
        if options.protocol == "ipmi":
            from soak.bmc.ipmi import IpmiTool, Lan

            port = options.port or 623
            lan = Lan(options.host, options.user, password, port, auth=options.ipmi_auth)
            return IpmiTool(lan)
        from soak.bmc.redfish import RedfishBmc, RedfishTarget

        url = _redfish_url(options.host, options.port)
        ca = str(options.ca_file) if options.ca_file is not None else None
        return RedfishBmc(RedfishTarget(url, options.user, password, options.insecure, ca))
    except BmcUnavailable as exc:
        return NoBmc(str(exc), f"{options.protocol} {options.host}")
