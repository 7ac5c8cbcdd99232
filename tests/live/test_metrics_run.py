"""A real soak serving its metrics: scraped while it runs by this test, and by a real
Prometheus server (Debian's ``prometheus``) that is then queried over its HTTP API."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


class Soak:
    """``soak run`` in a child process, its stderr drained (the view writes there) and
    watched for the exporter's address."""

    def __init__(self, tmp_path: Path, *args: str) -> None:
        cmd = [sys.executable, "-m", "soak", "run", "--backend", "sim", "--out", str(tmp_path)]
        self.proc = subprocess.Popen(
            [*cmd, "--metrics-port", "0", *args],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.url: str | None = None
        self.err: list[str] = []
        self._found = threading.Event()
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.err.append(line)
            if m := re.search(r"Prometheus metrics on (http://\S+)", line):
                self.url = m.group(1)
                self._found.set()
        self._found.set()

    def wait_url(self) -> str:
        assert self._found.wait(60), "no metrics address printed"
        assert self.url, "".join(self.err)
        return self.url

    def finish(self, timeout: float = 120) -> tuple[int, list[str]]:
        out, _ = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out.splitlines()


def scrape(url: str) -> dict[str, float]:
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    return {
        s.name + json.dumps(s.labels, sort_keys=True): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def elapsed(samples: dict[str, float]) -> float | None:
    return next((v for k, v in samples.items() if k.startswith("soak_run_elapsed_seconds")), None)


def test_metrics_change_while_the_soak_runs_and_its_exit_and_report_stay_the_same(tmp_path):
    # two simulated hours run for seconds: long enough to be scraped twice while running
    soak = Soak(tmp_path, "--sim-gpus", "2", "--hours", "2", "--seed", "3")
    url = soak.wait_url()
    assert url.startswith("http://127.0.0.1:")
    deadline = time.monotonic() + 60
    first = {}
    while elapsed(first) is None and time.monotonic() < deadline:
        first = scrape(url)
    second = scrape(url)
    while elapsed(second) == elapsed(first) and time.monotonic() < deadline:
        second = scrape(url)
    assert elapsed(second) > elapsed(first)
    temps = [k for k in second if k.startswith("soak_device_temperature_celsius")]
    assert len(temps) == 2
    inlet = [v for k, v in second.items() if k.startswith("soak_inlet_temperature_celsius")]
    assert len(inlet) == 1 and 15 < inlet[0] < 40  # the simulated BMC's reading, °C
    code, out = soak.finish()
    assert code in (0, 1), "".join(soak.err[-5:])
    assert out[-1].endswith("report.html") and Path(out[-1]).is_file()
    assert out[0].startswith("verdict: ")
    summary = json.loads((Path(out[-1]).parent / "summary.json").read_text())
    assert summary["run"]["stop_reason"] == "duration"


PROMETHEUS = shutil.which("prometheus")


def _query(base: str, q: str) -> list:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": q})
    body = json.loads(urllib.request.urlopen(url, timeout=5).read())
    assert body["status"] == "success", body
    return body["data"]["result"]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(
    PROMETHEUS is None, reason="needs Debian's prometheus (apt-get install prometheus)"
)
def test_a_real_prometheus_scrapes_a_running_soak(tmp_path):
    soak = Soak(tmp_path / "runs", "--sim-gpus", "2", "--hours", "200", "--seed", "4")
    try:
        target = soak.wait_url().removeprefix("http://").removesuffix("/metrics")
        port = _free_port()
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: soak\n    static_configs:\n"
            f"      - targets: ['{target}']\n"
        )
        prom = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 90
            series: list = []
            while time.monotonic() < deadline:
                try:
                    series = _query(
                        base, 'count_over_time(soak_device_temperature_celsius{device="0"}[1m])'
                    )
                except OSError:
                    series = []  # not listening yet
                if series and float(series[0]["value"][1]) >= 2:
                    break
                time.sleep(0.5)
            assert series and float(series[0]["value"][1]) >= 2, "no temperature series scraped"
            assert series[0]["metric"]["job"] == "soak"
            assert _query(base, 'up{job="soak"}')[0]["value"][1] == "1"
            text = urllib.request.urlopen(f"http://{target}/metrics", timeout=5).read()
            promtool = shutil.which("promtool")
            if promtool:
                check = subprocess.run(
                    [promtool, "check", "metrics"], input=text, capture_output=True, timeout=30
                )
                assert check.returncode == 0, check.stdout + check.stderr
        finally:
            prom.terminate()
            prom.wait(timeout=30)
    finally:
        soak.proc.send_signal(signal.SIGINT)  # stops cleanly and reports INCOMPLETE
        code, out = soak.finish()
    assert code == 3 and out[-1].endswith("report.html")
