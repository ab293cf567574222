from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

DATA = HERE.parent / "data"
GOLDEN = DATA / "golden"


@pytest.fixture
def data() -> Path:
    return DATA
