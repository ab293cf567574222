"""load(path) over .pte files written by vkx.format, in every constant layout."""
import numpy as np
import pytest

from vkx.format import FormatError, MissingKeyError
from vkx.loader import load
from vkx.loader.errors import FileError, LoadError, MissingDataError

from .helpers import relu_add_graph, weights, write_pte

LAYOUTS = [("named", None), ("legacy", None), ("named", "w.ptd"), ("named", "w.safetensors")]


@pytest.mark.parametrize("layout,external", LAYOUTS)
@pytest.mark.parametrize("schedule,upload", [("lazy", "auto"), ("lazy", "staging"), ("eager", "auto")])
def test_load_file(tmp_path, layout, external, schedule, upload):
    w = weights(3000)
    path, ext = write_pte(tmp_path, relu_add_graph(3000), [w], layout=layout, external=external)
    x = np.random.default_rng(2).standard_normal(3000).astype(np.float32)
    with load(path, [ext] if ext else (), schedule=schedule, upload=upload) as p:
        np.testing.assert_array_equal(p(x), np.maximum(x, 0) + w)
        names = [ph["name"] for ph in p.memory["phases"]]
        assert names == ["before load", "after graph build", "prepack start", "after prepack",
                         "after activation allocation", "after execute"]
    assert p.ledger.is_zero


def test_missing_external_key(tmp_path):
    path, ext = write_pte(tmp_path, relu_add_graph(), [weights()], external="w.ptd")
    with pytest.raises(MissingDataError) as info:
        load(path)
    assert isinstance(info.value, LoadError)
    assert isinstance(info.value, MissingKeyError)
    assert "m.pte" in str(info.value)


def test_bad_file(tmp_path):
    bad = tmp_path / "bad.pte"
    bad.write_bytes(b"\0" * 64)
    with pytest.raises(LoadError) as info:
        load(bad)
    assert isinstance(info.value, FormatError)
    with pytest.raises(FileError):
        load(tmp_path / "nope.pte")
