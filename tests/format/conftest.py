import importlib.util
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

DATA = HERE.parent / "data"
GOLDEN = DATA / "golden"
HAS_EXECUTORCH = importlib.util.find_spec("executorch") is not None
needs_executorch = pytest.mark.skipif(not HAS_EXECUTORCH, reason="executorch is not installed")


@pytest.fixture
def data() -> Path:
    return DATA
