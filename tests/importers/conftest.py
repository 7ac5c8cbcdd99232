from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "import"


@pytest.fixture
def fixture_path():
    return lambda name: FIXTURES / name


def run_folders(out: Path) -> list[Path]:
    return sorted(p for p in out.glob("*/*") if p.is_dir()) if out.exists() else []
