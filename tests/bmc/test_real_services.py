"""Real BMCs on 127.0.0.1: OpenIPMI's ``ipmi_sim`` read with ``ipmitool -I lan`` (its SDR
compiled with ``sdrcomp``) and OpenStack's ``sushy-emulator`` (``--fake``) read with DMTF's
``redfish`` library, each feeding a simulated soak's store and report. No password appears in
any file the run writes. Each test skips, saying why, only where its service cannot start."""

from __future__ import annotations

import importlib.util
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from soak.cli import main
from soak.store import STORE_NAME, RunStore

pytestmark = pytest.mark.slow

PASSWORD = "s0ak-Bmc-Pw-7f3a"  # grepped for in every file a run writes
SDR = """sdr type 1
\tsensor_owner_id\t\t0x20
\tsensor_owner_lun\t0
\tchannel_number\t\t0
\tsensor_number\t\t{number}
\tentity_id\t\t{entity}
\tentity_instance\t\t1
\tsensor_type\t\tTemperature
\tinit_scanning\t\ttrue
\tinit_sensor_type\ttrue
\tdefault_sensor_scan_on\ttrue
\tevent_reading_type_code\t1
\tanalog_data_format\tunsigned
\trate_unit\t\tnone
\tmodifier_unit\t\tnone
\tpercentage\t\tfalse
\tbase_unit\t\tdegrees_C
\tmodifier_unit_code\tunspecified
\tlinearization\t\tlinear
\tm\t\t\t1
\ttolerance\t\t0
\tb\t\t\t0
\taccuracy\t\t1
\taccuracy_exp\t\t0
\tsensor_direction\tinput
\tr_exp\t\t\t0
\tb_exp\t\t\t0
\tsensor_maximum\t\t255
\tsensor_minimum\t\t0
\tid_string\t\t"{name}"
endsdr
"""
AUTHS = "none md2 md5 straight"


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ipmi_sim(tmp_path: Path) -> Iterator[int]:
    """ipmi_sim serving an inlet sensor (24 °C, entity 55: air inlet) and an exhaust sensor
    (37 °C) on a free UDP port of 127.0.0.1, user ``soak``."""
    missing = [t for t in ("ipmi_sim", "sdrcomp", "ipmitool") if shutil.which(t) is None]
    if missing:
        pytest.skip(f"ipmi_sim cannot start here: {', '.join(missing)} not installed")
    port = free_port(socket.SOCK_DGRAM)
    home = tmp_path / "ipmi"
    state = home / "state" / "ipmi_sim" / "soaktest"
    state.mkdir(parents=True)
    allowed = "".join(f"    allowed_auths_{p} {AUTHS}\n" for p in ("callback", "user", "operator"))
    (home / "lan.conf").write_text(
        'name "soaktest"\nset_working_mc 0x20\n  startlan 1\n'
        f"    addr 127.0.0.1 {port}\n    priv_limit admin\n{allowed}"
        f"    allowed_auths_admin {AUTHS}\n"
        "    guid a123456789abcdefa123456789abcdef\n  endlan\n"
        f'  user 2 true "soak" "{PASSWORD}" admin 10 {AUTHS}\n'
    )
    sdrs = SDR.format(number=1, entity=55, name="Inlet Temp")
    sdrs += SDR.format(number=2, entity=7, name="Exhaust Temp")
    (home / "sim.sdrs").write_text(sdrs)
    subprocess.run(
        ["sdrcomp", "-o", str(state / "sdr.20.main"), str(home / "sim.sdrs")], check=True
    )
    (home / "sim.emu").write_text(
        "mc_setbmc 0x20\n"
        "mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr\n"
        "sensor_add 0x20 0 1 0x01 0x01\nsensor_set_value 0x20 0 1 24 0\n"
        "sensor_add 0x20 0 2 0x01 0x01\nsensor_set_value 0x20 0 2 37 0\n"
        "mc_enable 0x20\n"
    )
    cmd = ["ipmi_sim", "-c", "lan.conf", "-f", "sim.emu", "-s", str(home / "state")]
    # it exits when its console's stdin closes: the pipe stays open until the test ends
    proc = subprocess.Popen(
        cmd, cwd=home, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        for _ in range(50):
            probe = subprocess.run(
                ["ipmitool", "-I", "lan", "-H", "127.0.0.1", "-p", str(port), "-U", "soak",
                 "-E", "-R", "1", "-N", "1", "sdr", "type", "Temperature"],
                capture_output=True, text=True, env={"IPMI_PASSWORD": PASSWORD}, timeout=10,
            )  # fmt: skip
            if "Inlet Temp" in probe.stdout:
                break
            if proc.poll() is not None:
                pytest.skip(f"ipmi_sim cannot start here: exited with {proc.returncode}")
            time.sleep(0.2)
        else:
            pytest.skip(f"ipmi_sim cannot start here: no answer on UDP {port} ({probe.stderr})")
        yield port
    finally:
        proc.stdin.close()  # type: ignore[union-attr]
        proc.terminate()
        proc.wait(10)


def soak_args(out: Path, *bmc: str) -> list[str]:
    return [
        "run", "--backend", "sim", "--sim-gpus", "2", "--workload", "gemm", "--minutes", "20",
        "--until-steady", "--seed", "5", "--out", str(out), *bmc,
    ]  # fmt: skip


def the_run(out: Path) -> Path:
    (run,) = [p for p in out.rglob(STORE_NAME)]
    return run.parent


def assert_no_password(run: Path) -> None:
    for path in run.rglob("*"):
        if path.is_file():
            assert PASSWORD.encode() not in path.read_bytes(), f"the password is in {path}"


def test_ipmi_sim_over_lan_feeds_the_store_and_the_report(
    ipmi_sim: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setenv("SOAK_BMC_PASSWORD", PASSWORD)
    out = tmp_path / "reports"
    bmc = ["--bmc", "127.0.0.1", "--bmc-protocol", "ipmi", "--bmc-port", str(ipmi_sim)]
    assert main(soak_args(out, *bmc, "--bmc-user", "soak")) == 0
    err = capsys.readouterr().err
    assert f"soak: inlet: 'Inlet Temp' from ipmitool -I lan 127.0.0.1:{ipmi_sim}" in err
    run = the_run(out)
    store = RunStore.open(run / STORE_NAME)
    series = store.server_readings()
    store.close_read()
    assert set(series["inlet_c"]["value"]) == {24.0}
    assert set(series["chassis_temp_c:Exhaust Temp"]["value"]) == {37.0}
    # read again and again through the run: the reader thread keeps wall time, the simulated
    # run its own (faster) clock, so how many depends on the machine's load
    assert series["inlet_c"]["t_s"].size >= 5
    report = (run / "report.html").read_text()
    assert "of margin at 35 °C." in report and "Thermal headroom" in report
    assert f"&#39;Inlet Temp&#39; from ipmitool -I lan 127.0.0.1:{ipmi_sim}" in report
    assert_no_password(run)


def test_ipmi_login_refused_is_one_line_and_the_soak_goes_on(
    ipmi_sim: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    password = tmp_path / "pw"
    password.write_text("not-the-password\n")
    out = tmp_path / "reports"
    bmc = ["--bmc", "127.0.0.1", "--bmc-protocol", "ipmi", "--bmc-port", str(ipmi_sim)]
    args = soak_args(out, *bmc, "--bmc-user", "soak", "--bmc-password-file", str(password))
    assert main(args) == 0
    err = capsys.readouterr().err
    line = f"soak: inlet not available: ipmitool -I lan 127.0.0.1:{ipmi_sim}: "
    assert line in err
    report = (the_run(out) / "report.html").read_text()
    assert "not checked: inlet not available: ipmitool -I lan" in report


@pytest.fixture
def sushy(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """sushy-emulator --fake over TLS (a self-signed certificate for 127.0.0.1) with basic
    authentication for user ``soak``: its base URL and the certificate."""
    if (
        importlib.util.find_spec("sushy_tools") is None
        or importlib.util.find_spec("redfish") is None
    ):
        pytest.skip("sushy-emulator cannot start here: sushy-tools or redfish not installed")
    if shutil.which("openssl") is None:
        pytest.skip("sushy-emulator cannot start here over TLS: openssl not installed")
    import bcrypt

    home = tmp_path / "sushy"
    home.mkdir()
    cert, key = home / "cert.pem", home / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    digest = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
    (home / "htpasswd").write_text(f"soak:{digest}\n")
    (home / "conf.py").write_text(f"SUSHY_EMULATOR_AUTH_FILE = {str(home / 'htpasswd')!r}\n")
    port = free_port()
    emulator = Path(sys.executable).with_name("sushy-emulator")
    cmd = [
        str(emulator), "--fake", "-i", "127.0.0.1", "-p", str(port),
        "--config", str(home / "conf.py"), "--ssl-certificate", str(cert), "--ssl-key", str(key),
    ]  # fmt: skip
    log = (home / "log").open("w")
    proc = subprocess.Popen(cmd, cwd=home, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                said = (home / "log").read_text()[-300:]
                pytest.skip(f"sushy-emulator cannot start here: exited ({said})")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
        else:
            pytest.skip(f"sushy-emulator cannot start here: no answer on TCP {port} in 30 s")
        yield f"https://127.0.0.1:{port}", cert
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def test_sushy_emulator_over_verified_tls_feeds_the_store_and_the_report(
    sushy: tuple[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    url, cert = sushy
    password = tmp_path / "pw"
    password.write_text(PASSWORD + "\n")
    out = tmp_path / "reports"
    bmc = ["--bmc", url, "--bmc-user", "soak", "--bmc-password-file", str(password)]
    assert main(soak_args(out, *bmc, "--bmc-ca-file", str(cert))) == 0
    assert f"soak: inlet: 'Chassis Intake Temp' from redfish {url}" in capsys.readouterr().err
    run = the_run(out)
    store = RunStore.open(run / STORE_NAME)
    series = store.server_readings()
    store.close_read()
    assert set(series["inlet_c"]["value"]) == {25.0}  # sushy's fake Intake reading
    assert set(series["chassis_temp_c:CPU Temp"]["value"]) == {41.0}
    report = (run / "report.html").read_text()
    assert "of margin at 35 °C." in report
    assert_no_password(run)


def test_sushy_unverified_certificate_or_refused_login_is_one_line(
    sushy: tuple[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    url, _ = sushy
    monkeypatch.setenv("SOAK_BMC_PASSWORD", PASSWORD)
    out = tmp_path / "a"
    assert main(soak_args(out, "--bmc", url, "--bmc-user", "soak")) == 0  # self-signed: refused
    err = capsys.readouterr().err
    assert (
        f"soak: inlet not available: redfish {url}: TLS certificate not verified "
        "(give --bmc-ca-file FILE, or --bmc-insecure)"
    ) in err
    report = (the_run(out) / "report.html").read_text()
    assert "not checked: inlet not available: redfish" in report
    monkeypatch.setenv("SOAK_BMC_PASSWORD", "wrong")
    out = tmp_path / "b"
    args = soak_args(out, "--bmc", url, "--bmc-user", "soak", "--bmc-insecure")
    assert main(args) == 0
    assert f"soak: inlet not available: redfish {url}: login refused" in capsys.readouterr().err
