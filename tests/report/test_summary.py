"""summary.json: documented, versioned, and old files still load."""

import json
import re
from pathlib import Path

import pytest

from soak.errors import ConfigError
from soak.report.summary import SCHEMA_VERSION, load_summary

FIXTURES = Path(__file__).parents[1] / "fixtures" / "summary"
SCHEMA_DOC = Path(__file__).parents[2] / "docs" / "summary-schema.md"

# Objects whose keys are data (workload parts, metric names, tags), not schema: their own
# keys are not looked up in the documentation, the keys of their values are.
DATA_KEYED = re.compile(
    r"^(run\.tags|host|devices\.(cold|steady|ratio)\.(throughput|energy_per_work)"
    r"|devices\.throughput_units|devices\.reason_share|devices\.counters"
    r"|devices\.steady_noise\.(se|step)|devices\.steady_noise\.se\.throughput"
    r"|headroom\.devices\.projected_throughput)$"
)


def _keys(value, path=""):
    if isinstance(value, dict):
        data_keyed = bool(DATA_KEYED.match(path))
        for key, child in value.items():
            if not data_keyed:
                yield path, key
            yield from _keys(child, path if data_keyed else f"{path}.{key}".lstrip("."))
    elif isinstance(value, list):
        for child in value:
            yield from _keys(child, path)


def test_every_key_of_a_fresh_summary_is_documented(faulty_run):
    summary = json.loads((faulty_run / "summary.json").read_text())
    documented = set(re.findall(r"`([a-z_0-9]+)`", SCHEMA_DOC.read_text()))
    missing = sorted({f"{p}.{k}".lstrip(".") for p, k in _keys(summary) if k not in documented})
    assert not missing, f"document these keys in docs/summary-schema.md: {missing}"


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.json")), ids=lambda p: p.name)
def test_kept_summaries_of_earlier_soaks_still_load(path):
    summary = load_summary(path)
    assert summary["schema_version"] == SCHEMA_VERSION
    assert summary["verdict"] in {"PASS", "FAIL", "INCOMPLETE"}
    for device in summary["devices"]:
        assert {"index", "name", "verdict", "cold", "steady", "ratio"} <= set(device)


def test_at_least_two_kept_summaries():
    assert len(list(FIXTURES.glob("*.json"))) >= 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"schema_version": 99}', "schema_version 99 is not supported (1)"),
        ('{"verdict": "PASS"}', "schema_version None is not supported"),
        ("[1, 2]", "schema_version None is not supported"),
        ("{not json", "not JSON"),
    ],
)
def test_an_unknown_or_broken_summary_is_refused_in_one_line(tmp_path, text, message):
    path = tmp_path / "summary.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(message)) as info:
        load_summary(path)
    assert "\n" not in str(info.value) and str(path) in str(info.value)
