"""IPMI through Debian's ``ipmitool``: in-band (``/dev/ipmi0``) or over LAN (``-I lan``).

``ipmitool sdr type Temperature`` lists one sensor a line::

    Inlet Temp       | 04h | ok  | 55.1 | 23 degrees C
    Exhaust Temp     | 01h | ns  |  7.1 | No Reading

name, sensor number, status, entity ID.instance, reading. The password never appears on a
command line: ipmitool reads it from ``IPMI_PASSWORD`` (``-E``), set only in its environment.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass

from soak.bmc.base import Sensor
from soak.errors import BmcUnavailable

TIMEOUT_S = 15.0  # one SDR walk over LAN, with ipmitool's own retries bounded below
_READING = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s+degrees C\s*$")


def parse_sdr(text: str) -> list[Sensor]:
    """The sensors of ``ipmitool sdr type Temperature``; a line that is not one is skipped,
    a reading that is not a number of degrees is None."""
    sensors = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) != 5 or not cells[0]:
            continue
        name, _number, status, entity, reading = cells
        match = _READING.match(reading)
        value = float(match.group(1)) if match and status.lower() != "ns" else None
        entity_id = entity.split(".")[0]
        sensors.append(Sensor(name, value, int(entity_id) if entity_id.isdigit() else None))
    return sensors


@dataclass(frozen=True, slots=True)
class Lan:
    """Where a BMC answers IPMI over LAN (IPMI 1.5 ``lan``; ``lanplus`` for RMCP+)."""

    host: str
    user: str
    password: str
    port: int = 623
    interface: str = "lan"
    auth: str | None = None  # "MD5", "PASSWORD", ...: ipmitool's -A, where the BMC needs one

    def __repr__(self) -> str:  # never the password, not even in a traceback
        return f"Lan(host={self.host!r}, port={self.port}, user={self.user!r})"


class IpmiTool:
    """A BMC read through ``ipmitool``: in-band where ``lan`` is None."""

    def __init__(self, lan: Lan | None = None, ipmitool: str = "ipmitool") -> None:
        path = shutil.which(ipmitool)
        if path is None:
            raise BmcUnavailable(f"{ipmitool} not found (Debian: apt-get install ipmitool)")
        self._argv = [path]
        self._env = dict(os.environ)
        if lan is None:
            self.source = "ipmitool (in-band)"
        else:
            self._argv += ["-I", lan.interface, "-H", lan.host, "-p", str(lan.port)]
            self._argv += ["-U", lan.user, "-E", "-R", "2", "-N", "2"]
            if lan.auth:
                self._argv += ["-A", lan.auth]
            self._env["IPMI_PASSWORD"] = lan.password
            self.source = f"ipmitool -I {lan.interface} {lan.host}:{lan.port}"

    def temperatures(self) -> list[Sensor]:
        argv = [*self._argv, "sdr", "type", "Temperature"]
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=TIMEOUT_S, env=self._env
            )
        except subprocess.TimeoutExpired as exc:
            raise BmcUnavailable(f"{self.source}: no answer within {TIMEOUT_S:.0f} s") from exc
        except OSError as exc:
            raise BmcUnavailable(f"{self.source}: {exc.strerror or exc}") from exc
        if done.returncode != 0:
            said = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise BmcUnavailable(f"{self.source}: {said}")
        return parse_sdr(done.stdout)

    def close(self) -> None:
        """Nothing held between reads: each is one ipmitool process."""
