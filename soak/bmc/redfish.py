"""Redfish through DMTF's ``redfish`` client library (PyPI ``redfish``, the ``bmc`` extra).

Every chassis under ``/redfish/v1/Chassis`` is read: its ``Thermal`` resource's
``Temperatures`` (``Name``, ``ReadingCelsius``, ``PhysicalContext``), and where it has one,
the newer ``ThermalSubsystem``'s ``ThermalMetrics`` summary (``TemperatureSummaryCelsius``:
``Intake``, ``Ambient``, ``Internal``, ``Exhaust``). The login is HTTP basic (many BMCs and
sushy-emulator have no session service); the password is held only in the client.

TLS is verified: the library verifies a certificate only when given a CA file, so soak
always gives one (``--bmc-ca-file``, else the bundle ``requests`` trusts) unless
``--bmc-insecure`` says otherwise.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from soak.bmc.base import Sensor
from soak.errors import BmcUnavailable

log = logging.getLogger(__name__)

TIMEOUT_S = 10  # per request
RETRIES = 1


@dataclass(frozen=True, slots=True)
class RedfishTarget:
    """Where a Redfish service answers and how to trust it."""

    url: str  # https://host[:port] (http:// only where asked)
    user: str
    password: str
    insecure: bool = False  # do not verify the certificate
    ca_file: str | None = None

    def __repr__(self) -> str:  # never the password
        return f"RedfishTarget(url={self.url!r}, user={self.user!r}, insecure={self.insecure})"


def _ca_file(target: RedfishTarget) -> str | None:
    if target.insecure:
        return None
    if target.ca_file:
        return target.ca_file
    import requests.certs

    return requests.certs.where()


class RedfishBmc:
    """A BMC read over Redfish, logged in once."""

    def __init__(self, target: RedfishTarget) -> None:
        try:
            import redfish
            from redfish.rest.v1 import (
                InvalidCredentialsError,
                RetriesExhaustedError,
                ServerDownOrUnreachableError,
                SessionCreationError,
            )
        except ImportError as exc:
            raise BmcUnavailable(
                f"the redfish library is not installed (pip install 'soak[bmc]'): {exc}"
            ) from exc
        self.source = f"redfish {target.url}"
        # the library logs each request's headers (the basic-auth one) at debug level
        logging.getLogger("redfish").setLevel(logging.INFO)
        if target.insecure:  # asked for, and recorded in the run's command: not repeated
            import urllib3

            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        self._errors: tuple[type[BaseException], ...] = (
            InvalidCredentialsError,
            RetriesExhaustedError,
            ServerDownOrUnreachableError,
            SessionCreationError,
            OSError,
            ValueError,
        )
        try:
            self._client = redfish.redfish_client(
                base_url=target.url,
                username=target.user,
                password=target.password,
                cafile=_ca_file(target),
                timeout=TIMEOUT_S,
                max_retry=RETRIES,
            )
            self._client.login(auth="basic")
        except self._errors as exc:
            raise BmcUnavailable(f"{self.source}: {_why(exc)}") from exc

    def _get(self, path: str) -> dict[str, Any]:
        try:
            response = self._client.get(path)
        except self._errors as exc:
            raise BmcUnavailable(f"{self.source}: {_why(exc)}") from exc
        if response.status == 401:
            raise BmcUnavailable(f"{self.source}: login refused (HTTP 401)")
        if response.status != 200:
            raise BmcUnavailable(f"{self.source}: GET {path} answered HTTP {response.status}")
        return response.dict

    def temperatures(self) -> list[Sensor]:
        sensors: list[Sensor] = []
        for member in self._get("/redfish/v1/Chassis").get("Members", []):
            chassis = self._get(member["@odata.id"])
            if "Thermal" in chassis:
                sensors += thermal_sensors(self._get(chassis["Thermal"]["@odata.id"]))
            subsystem = chassis.get("ThermalSubsystem", {}).get("@odata.id")
            if subsystem:
                metrics = self._get(subsystem).get("ThermalMetrics", {}).get("@odata.id")
                if metrics:
                    sensors += summary_sensors(self._get(metrics), chassis.get("Id", "chassis"))
        return sensors

    def close(self) -> None:
        try:
            self._client.logout()
        except self._errors:
            log.debug("redfish logout failed", exc_info=True)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def thermal_sensors(thermal: dict[str, Any]) -> list[Sensor]:
    """The sensors of a ``Thermal`` resource; a disabled one or one without a reading is
    None."""
    out = []
    for t in thermal.get("Temperatures", []):
        enabled = t.get("Status", {}).get("State", "Enabled") == "Enabled"
        value = _number(t.get("ReadingCelsius")) if enabled else None
        name = t.get("Name") or f"Temperature {t.get('MemberId', len(out))}"
        out.append(Sensor(name, value, context=t.get("PhysicalContext")))
    return out


def summary_sensors(metrics: dict[str, Any], chassis: str) -> list[Sensor]:
    """The ``TemperatureSummaryCelsius`` of a ``ThermalMetrics`` resource, one sensor per
    context (``Intake``...), named after it and its chassis."""
    out = []
    for context, excerpt in metrics.get("TemperatureSummaryCelsius", {}).items():
        if isinstance(excerpt, dict):
            name = f"{chassis} {context} (ThermalSubsystem)"
            out.append(Sensor(name, _number(excerpt.get("Reading")), context=context))
    return out


def _why(exc: BaseException) -> str:
    """The one line said about a failed Redfish call."""
    name = type(exc).__name__
    if name == "InvalidCredentialsError":
        return "login refused"
    if name in ("RetriesExhaustedError", "ServerDownOrUnreachableError"):
        cause = exc.__cause__ or exc.__context__
        if cause is not None and type(cause).__name__ == "SSLError":
            return "TLS certificate not verified (give --bmc-ca-file FILE, or --bmc-insecure)"
        detail = f" ({type(cause).__name__})" if cause is not None else ""
        return f"no answer{detail}"
    return str(exc).splitlines()[0] if str(exc) else name
