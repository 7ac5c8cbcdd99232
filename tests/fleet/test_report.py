"""soak fleet report: a simulated fleet, the real V100 SGEMM table, missing and unreadable
nodes, the rack map, fleet.json against its JSON Schema."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from soak.cli import main
from testkit.fleet import FAULTS, host_name, load, write_fleet
from testkit.traces import missing_reason, trace_dir

REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "docs" / "fleet.schema.json").read_text())
V100_NAME = "v100-sc22-sgemm-per-gpu-aggregate"
V100 = trace_dir(V100_NAME) or Path(V100_NAME)
FAULTY = {5: FAULTS[0], 20: FAULTS[1], 41: FAULTS[2], 60: FAULTS[3]}


def report(capsys, *argv: str) -> tuple[int, list[str], dict]:
    rc = main(["fleet", "report", *argv])
    lines = capsys.readouterr().out.splitlines()
    data = json.loads((Path(lines[-1]).parent / "fleet.json").read_text())
    jsonschema.validate(data, SCHEMA)
    return rc, lines, data


@pytest.fixture(scope="module")
def sim_fleet(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fleet")
    write_fleet(out, 64, FAULTY)
    return out


def test_the_fault_fixtures_are_what_the_fleet_test_needs():
    # The 5 %-slow device passes its own server's check (within its server's spread) ...
    slow = load(FAULTS[3])
    assert slow["verdict"] == "PASS"
    # ... and each injected fault failed its own run.
    assert [load(name)["verdict"] for name in FAULTS[:3]] == ["FAIL"] * 3


@pytest.mark.slow
def test_sim_fleet_ranks_the_four_faulty_servers_below_the_rest(sim_fleet, capsys):
    rc, lines, data = report(capsys, str(sim_fleet), "--no-history")
    assert rc == 1 and data["verdict"] == "FAIL"
    worst_four = {n["node"] for n in data["nodes"][:4]}
    assert worst_four == {host_name(i) for i in FAULTY}
    assert all(n["status"] == "pass" for n in data["nodes"][4:])
    assert data["counts"] == {
        "nodes": 64,
        "devices": 512,
        "expected": None,
        "missing": 0,
        "unreadable": 0,
        "outliers": len(data["outliers"]),
    }
    # The slow device: outside the fleet's spread, though its server passed it.
    slow = next(n for n in data["nodes"] if n["node"] == host_name(60))
    assert slow["verdict"] == "PASS" and slow["status"] == "fail"
    assert slow["worst"]["index"] == 3 and 0.045 < slow["worst"]["slowness"] < 0.06
    flagged = {(o["node"], o["index"]) for o in data["outliers"] if o["status"] == "fail"}
    assert (host_name(60), 3) in flagged
    assert {node for node, _ in flagged} <= {host_name(i) for i in FAULTY}
    outlier = next(o for o in data["outliers"] if o["node"] == host_name(60))
    assert outlier["n"] == 512
    assert f"of 512 {load(FAULTS[3])['devices'][3]['name']} devices; limit" in outlier["message"]
    assert lines[-1] == str(sim_fleet / "fleet.html")


@pytest.mark.slow
def test_fleet_html_is_self_contained_and_names_the_outliers(sim_fleet, capsys):
    report(capsys, str(sim_fleet), "--no-history")
    html = (sim_fleet / "fleet.html").read_text()
    assert "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in html and "<script" not in html
    assert "GPU-synth-0060-03" in html and "Rack map" in html
    assert html.count("<svg") >= 5  # throughput, loss, temperature, power, clock


@pytest.mark.slow
def test_rack_map_from_tags_and_from_a_layout_file(sim_fleet, tmp_path, capsys):
    _, _, data = report(capsys, str(sim_fleet), "--no-history")
    node = next(n for n in data["nodes"] if n["node"] == host_name(41))
    assert (node["rack"], node["slot"]) == ("r3", "9")
    layout = tmp_path / "layout.csv"
    layout.write_text(
        "host,rack,slot\n" + "".join(f"{host_name(i)},row-a{i // 32},{i % 32}\n" for i in range(64))
    )
    _, _, data = report(capsys, str(sim_fleet), "--no-history", "--layout", str(layout))
    node = next(n for n in data["nodes"] if n["node"] == host_name(41))
    assert (node["rack"], node["slot"]) == ("row-a1", "9")


def test_missing_and_unreadable_nodes_are_listed_never_dropped(tmp_path, capsys):
    write_fleet(tmp_path, 6)
    (tmp_path / "fleet-nodes.txt").write_text("".join(host_name(i) + "\n" for i in range(8)))
    bad = tmp_path / "gpu009" / "20261201T080000Z"
    bad.mkdir(parents=True)
    (bad / "summary.json").write_text('{"schema_version": 99}')
    rc, lines, data = report(capsys, str(tmp_path), "--no-history")
    assert data["missing"] == [host_name(6), host_name(7)]
    assert data["unreadable"][0]["path"] == "gpu009/20261201T080000Z/summary.json"
    assert "schema_version 99 is not supported" in data["unreadable"][0]["error"]
    assert rc == 3 and data["verdict"] == "INCOMPLETE"  # every node that ran passed
    assert f"  MISSING  {host_name(6)}: expected, but left no summary.json" in lines
    html = (tmp_path / "fleet.html").read_text()
    assert host_name(7) in html and "gpu009/20261201T080000Z/summary.json" in html


def test_a_later_run_of_a_host_supersedes_its_earlier_one(tmp_path, capsys):
    write_fleet(tmp_path, 6, started_utc="2026-12-01T08:00:00Z")
    write_fleet(tmp_path, 6, {2: FAULTS[1]}, started_utc="2026-12-02T08:00:00Z")
    _, _, data = report(capsys, str(tmp_path), "--no-history")
    assert data["counts"]["nodes"] == 6 and len(data["superseded"]) == 6
    assert data["nodes"][0]["node"] == host_name(2)
    assert data["nodes"][0]["verdict"] == "FAIL"


def test_bad_input_is_one_line_and_creates_nothing(tmp_path, capsys):
    assert main(["fleet", "report", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"soak: error: {tmp_path / 'nowhere'}: not a folder"]
    write_fleet(tmp_path, 2)
    assert main(["fleet", "report", str(tmp_path), "--layout", str(tmp_path / "x.csv")]) == 2
    assert not (tmp_path / "fleet.json").exists() and not (tmp_path / "fleet.html").exists()


@pytest.fixture(scope="module")
def v100(tmp_path_factory) -> tuple[int, list[str], dict]:
    table = V100 / "sgemm-longhorn-agg.csv"
    if not table.is_file():
        pytest.skip(missing_reason(V100_NAME))
    out = tmp_path_factory.mktemp("v100")
    argv = [
        "fleet",
        "report",
        str(out),
        "--table",
        str(table),
        "--id-col",
        "uuid",
        "--map",
        "time=perf",
        "--map",
        "temp_c=temp",
        "--map",
        "power_w=pwr",
        "--map",
        "sm_clock_mhz=freq",
    ]
    rc = main(argv)
    data = json.loads((out / "fleet.json").read_text())
    jsonschema.validate(data, SCHEMA)
    return rc, argv, data


@pytest.mark.slow
def test_v100_table_names_the_worst_gpu_with_its_figures(v100):
    rc, _, data = v100
    assert rc == 1 and data["counts"]["devices"] == 392
    worst = data["outliers"][0]
    assert worst["uuid"].startswith("GPU-87570fdd-")
    assert worst["message"] == (
        "perf 2929 is 20.3 % slower than the fleet median 2435 of 392 devices; limit 5.2 % "
        "(at 81 °C, 1312 MHz, 250 W)"
    )
    assert data["nodes"][0]["worst"]["uuid"] == worst["uuid"]


def test_v100_table_finds_the_few_5_to_8_percent_slow_and_nothing_within_the_spread(v100):
    _, _, data = v100
    others = [o for o in data["outliers"][1:] if o["metric"] == "work"]
    assert 2 <= len(others) <= 5
    assert all(0.05 <= o["deviation"] <= 0.08 for o in others)
    # every device not flagged is within the limit; every flagged one beyond it
    limit = data["outliers"][0]["limit"]
    flagged = {o["uuid"] for o in data["outliers"] if o["metric"] == "work"}
    for d in data["devices"]:
        assert (d["slowness"]["perf"] > limit) == (d["uuid"] in flagged)
    assert not [o for o in data["outliers"] if o["status"] == "warn"]  # no hot outlier there


def test_table_bad_map_is_one_line(tmp_path, capsys):
    table = tmp_path / "t.csv"
    table.write_text("uuid,perf\nGPU-1,2\n")
    assert (
        main(["fleet", "report", str(tmp_path / "o"), "--table", str(table), "--map", "time=nope"])
        == 2
    )
    assert (
        capsys.readouterr().err.strip()
        == f"soak: error: --map time=nope: no column 'nope' in {table}"
    )
    assert not (tmp_path / "o").exists()


def test_a_hot_device_warns_without_failing_the_fleet(tmp_path, capsys):
    write_fleet(tmp_path, 8)
    path = next((tmp_path / host_name(3)).glob("*/summary.json"))
    data = json.loads(path.read_text())
    data["devices"][5]["steady"]["temp_c"] += 16.0  # 86 °C; the limit: 69 + 3 σ = 82.3 °C
    path.write_text(json.dumps(data))
    rc, lines, fleet = report(capsys, str(tmp_path), "--no-history")
    assert rc == 0 and fleet["verdict"] == "PASS"
    (hot,) = fleet["outliers"]
    assert (hot["node"], hot["index"], hot["metric"], hot["status"]) == (
        host_name(3),
        5,
        "temp_c",
        "warn",
    )
    assert fleet["nodes"][0]["node"] == host_name(3) and fleet["nodes"][0]["status"] == "warn"
    assert "  WARN  GPU-synth-0003-05: steady temperature" in "\n".join(lines)


def test_expect_names_the_nodes_that_should_be_there(tmp_path, capsys):
    write_fleet(tmp_path / "f", 3)
    expect = tmp_path / "nodes.txt"
    expect.write_text("# the delivery\ngpu000\ngpu001\ngpu002\ngpu017\n")
    rc, _, fleet = report(capsys, str(tmp_path / "f"), "--no-history", "--expect", str(expect))
    assert fleet["missing"] == ["gpu017"] and fleet["counts"]["expected"] == 4 and rc == 3


def test_a_layout_file_without_its_columns_is_refused(tmp_path, capsys):
    write_fleet(tmp_path / "f", 2)
    layout = tmp_path / "layout.csv"
    layout.write_text("host,rack\ngpu000,r1\n")
    assert main(["fleet", "report", str(tmp_path / "f"), "--layout", str(layout)]) == 2
    assert capsys.readouterr().err.strip() == f"soak: error: --layout {layout}: no column slot"
    assert not (tmp_path / "f" / "fleet.html").exists()


def test_too_few_devices_of_a_sku_are_shown_but_not_judged(tmp_path, capsys):
    write_fleet(tmp_path, 1)
    path = next(tmp_path.glob("*/*/summary.json"))
    data = json.loads(path.read_text())
    data["devices"] = data["devices"][:4]
    data["devices"][0]["steady"]["throughput"]["gemm"] *= 0.5
    path.write_text(json.dumps(data))
    _, _, fleet = report(capsys, str(tmp_path), "--no-history")
    work = next(d for d in fleet["distributions"] if d["metric"] == "work")
    assert work["n"] == 4 and work["limit"] is None and fleet["outliers"] == []


def test_each_sku_is_judged_against_its_own_kind(tmp_path, capsys):
    write_fleet(tmp_path, 16)
    for i in range(8):  # half the fleet is a faster SKU
        path = next((tmp_path / host_name(i)).glob("*/summary.json"))
        data = json.loads(path.read_text())
        for d in data["devices"]:
            d["name"] = "NVIDIA H200"
            d["steady"]["throughput"]["gemm"] *= 1.3
        path.write_text(json.dumps(data))
    _, _, fleet = report(capsys, str(tmp_path), "--no-history")
    work = {d["sku"]: d["n"] for d in fleet["distributions"] if d["metric"] == "work"}
    assert work == {"NVIDIA H200": 64, load(FAULTS[0])["devices"][0]["name"]: 64}
    assert fleet["outliers"] == [] and fleet["verdict"] == "PASS"


def _with_headroom(path: Path, margins: dict[int, float]) -> None:
    """Give a synthetic summary a headroom block: ``margins`` per device index."""
    data = json.loads(path.read_text())
    data["headroom"] = {
        "checked": True,
        "reason": None,
        "design_inlet_c": 35.0,
        "devices": [
            {"device": i, "margin_c": m, "throttle_inlet_c": 35.0 + m} for i, m in margins.items()
        ],
    }
    path.write_text(json.dumps(data))


@pytest.mark.slow  # writes and reports a fleet of 8 (about 3 s on 2 cores)
def test_devices_rank_by_headroom_and_the_rack_map_shows_the_hot_corner(tmp_path, capsys):
    write_fleet(tmp_path, 8)
    for i, margin in ((2, 1.5), (6, 9.0)):
        path = next((tmp_path / host_name(i)).glob("*/summary.json"))
        _with_headroom(path, {0: margin + 2.0, 3: margin})
    _, lines, fleet = report(capsys, str(tmp_path), "--no-history")
    ranked = [(h["node"], h["index"], h["margin_c"]) for h in fleet["headroom"]]
    assert ranked == [
        (host_name(2), 3, 1.5),
        (host_name(2), 0, 3.5),
        (host_name(6), 3, 9.0),
        (host_name(6), 0, 11.0),
    ]
    unchecked = [d for d in fleet["devices"] if d["node"] == host_name(1)]
    assert all(d["headroom_margin_c"] is None for d in unchecked)  # not checked: never 0
    html = Path(lines[-1]).read_text()
    assert "2 °C headroom" in html and "9 °C headroom" in html
