import importlib.util
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # fmt_tiny

DATA = HERE.parent / "data"
GOLDEN = DATA / "golden"
HAS_EXECUTORCH = importlib.util.find_spec("executorch") is not None
needs_executorch = pytest.mark.skipif(not HAS_EXECUTORCH, reason="executorch is not installed")


@pytest.fixture
def data() -> Path:
    return DATA
