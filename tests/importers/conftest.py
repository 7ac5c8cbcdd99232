import os
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "import"
REPO = Path(__file__).resolve().parents[2]
# In CI the repository is cloned next to a copy of shared/; SOAK_REAL_TRACES points elsewhere.
REAL_TRACES = Path(
    os.environ.get("SOAK_REAL_TRACES", REPO.parent / "shared" / "data" / "real-traces")
)


@pytest.fixture
def fixture_path():
    return lambda name: FIXTURES / name


def run_folders(out: Path) -> list[Path]:
    return sorted(p for p in out.glob("*/*") if p.is_dir()) if out.exists() else []
