"""Weights used in place from the mapped file (VK_EXT_external_memory_host): no device
memory, no copy (upload="import" only: "auto" never maps a file); typed refusals; the file's lifetime and
changes."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
import vulkan as vk

from vkx.format import vkgraph as g
from vkx.loader import load, load_graph
from vkx.loader.gpu.device import default_device
from vkx.loader.errors import DeviceError, ImportRefusedError, LoadError, OutOfDeviceMemoryError
from tests.memory.chain_model import write_chain
from tests.memory.conftest import run_py

from .helpers import relu_add_graph, tensor, weights, write_pte

MiB = 1 << 20
N = 128 * 1024  # float32 weights of 512 KiB: pages of their own under the default export alignment

needs_import = pytest.mark.skipif(default_device().import_alignment is None,
                                  reason="the device has no VK_EXT_external_memory_host")


def two_weights_graph(n: int) -> g.VkGraph:
    """out = relu(x) + w0 + w1 (constants 0 and 1, n float32 each)."""
    values = [tensor([n]), tensor([n], cid=0), tensor([n], cid=1), tensor([n], mem=0), tensor([n], mem=1),
              tensor([n], mem=0)]
    chain = [g.OperatorCall(0, "test.relu.default", (0, 3)),
             g.OperatorCall(1, "test.add.default", (3, 1, 4)),
             g.OperatorCall(2, "test.add.default", (4, 2, 5))]
    consts = [g.ConstantRef(g.NAMED_OFFSET, n * 4, "w0"), g.ConstantRef(g.NAMED_OFFSET, n * 4, "w1")]
    return g.VkGraph(chain=chain, values=values, input_ids=[0], output_ids=[5], constants=consts)


def write_two(tmp_path, n: int, layout="named", external=None):
    w0, w1 = weights(n, seed=1), weights(n, seed=2)
    return write_pte(tmp_path, two_weights_graph(n), [w0, w1], layout=layout, external=external)


def run_bits(path, ext, x, **kw) -> tuple[np.ndarray, dict]:
    with load(path, [ext] if ext else (), **kw) as p:
        out = p(x).view(np.uint32).copy()
        memory = p.memory
    assert p.ledger.is_zero
    return out, memory


@needs_import
@pytest.mark.parametrize("external", [None, "w.ptd", "w.safetensors"])
def test_all_imported_zero_copies_bit_identical(tmp_path, external):
    n = N  # safetensors packs them: 512 KiB keeps the second one page-aligned too
    path, ext = write_two(tmp_path, n, external=external)
    x = np.random.default_rng(3).standard_normal(n).astype(np.float32)
    out, memory = run_bits(path, ext, x, upload="import")
    assert memory["upload"] == "import"
    assert memory["weight_paths"] == {"imported": 2 * n * 4, "direct": 0, "staged": 0}
    assert memory["copies_per_weight_byte"] == 0.0
    live = memory["ledger"]["live"]
    assert live["weights"] == 0 and live["imported"] >= 2 * n * 4  # no device memory for the weights
    for copied in ("direct", "staging"):
        ref, ref_memory = run_bits(path, ext, x, upload=copied)
        assert ref_memory["copies_per_weight_byte"] >= 1.0
        np.testing.assert_array_equal(out, ref)
    expect = np.maximum(x, 0) + weights(n, seed=1) + weights(n, seed=2)
    np.testing.assert_array_equal(out, expect.view(np.uint32))


@needs_import
def test_forced_import_of_a_misaligned_weight_is_refused(tmp_path):
    n = 1001
    path, ext = write_two(tmp_path, n, external="w.safetensors")
    with pytest.raises(ImportRefusedError) as info:
        load(path, [ext], upload="import")
    error = info.value
    assert isinstance(error, DeviceError) and isinstance(error, LoadError)
    text = str(error)
    assert "constant 1" in text and "alignment" in text and "\n" not in text
    assert error.ledger["total"] == 0 and error.ledger["buffers"] == 0  # w0's import was released
    x = np.ones(n, np.float32)
    out, _ = run_bits(path, ext, x, upload="auto")  # the process loads again
    np.testing.assert_array_equal(out, (x + weights(n, seed=1) + weights(n, seed=2)).view(np.uint32))


@needs_import
def test_forced_import_names_why_a_weight_has_no_file_pages(tmp_path):
    path, _ = write_pte(tmp_path, relu_add_graph(3000), [weights(3000)], layout="legacy")
    with pytest.raises(ImportRefusedError, match="legacy delegate blob"):
        load(path, upload="import")
    with pytest.raises(ImportRefusedError, match="in memory"):
        load_graph(relu_add_graph(3000), [weights(3000).tobytes()], upload="import")
    with pytest.raises(LoadError, match="needs schedule='lazy'"):
        load(path, upload="import", schedule="eager")
    # auto copies such weights instead: a legacy file still loads with every byte copied, directly
    # where device memory is host memory (integrated, CPU), else as the device's memory types say
    _, memory = run_bits(path, None, np.ones(3000, np.float32), upload="auto")
    paths = memory["weight_paths"]
    assert paths["imported"] == 0 and paths["direct"] + paths["staged"] == 3000 * 4, paths
    if default_device().integrated:
        assert paths["direct"] == 3000 * 4, paths


def test_auto_never_maps_a_file(tmp_path, monkeypatch):
    """"auto" copies on every device (a mapped file that shrinks would kill the process: docs/safety.md);
    "import" is refused without the extension and imports with it, on a discrete GPU too."""
    dev = default_device()
    path, _ = write_two(tmp_path, N)
    x = np.ones(N, np.float32)
    _, memory = run_bits(path, None, x, upload="auto")
    assert memory["upload"] != "import" and memory["weight_paths"]["imported"] == 0
    monkeypatch.setattr(dev, "import_alignment", None)
    with pytest.raises(ImportRefusedError, match="no VK_EXT_external_memory_host"):
        load(path, upload="import")
    monkeypatch.undo()
    if dev.import_alignment is None:
        return
    monkeypatch.setattr(dev, "device_type", vk.VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU)
    _, memory = run_bits(path, None, x, upload="import")
    assert memory["weight_paths"]["imported"] == 2 * N * 4


def _mapped(path) -> bool:
    with open("/proc/self/maps") as f:
        return any(line.rstrip().endswith(os.fspath(path)) for line in f)


@needs_import
def test_file_stays_mapped_while_the_program_lives(tmp_path):
    path, ext = write_two(tmp_path, N, external="w.ptd")
    with load(path, [ext], upload="import") as p:
        assert _mapped(ext)            # the imported weights' pages
        assert not _mapped(path)       # the .pte holds no imported weight: closed after prepack
        p(np.ones(N, np.float32))
    assert not _mapped(ext)            # unmapped after the device memory is freed
    with load(path, [ext], upload="direct"):
        assert not _mapped(ext)


RSS = r"""
import json, sys
import numpy as np
from vkx.loader import load
from vkx.loader.gpu.device import default_device
from vkx.loader.upload.trace import read_status
path, upload = sys.argv[1:3]
default_device()  # created before the baseline, as the load's own timeline does
before = read_status()
with load(path, upload=upload) as p:
    loaded = read_status()
    out, = p.run_numpy(np.ones(p.input_specs[0][0], np.float32))  # no torch: its import is 150 MiB
    ran = read_status()
    paths = p.memory["weight_paths"]
print(json.dumps({"load_anon": loaded["RssAnon"] - before["RssAnon"], "run_anon": ran["RssAnon"] - before["RssAnon"],
                  "run_file": ran["RssFile"] - before["RssFile"], "paths": paths, "sum": float(out.sum())}))
"""


@needs_import
def test_rss_anon_grows_by_activations_only_weights_are_file_pages(tmp_path):
    layers, elems = 8, 2 * MiB                        # W = 64 MiB
    W, A_IO = layers * elems * 4, 4 * elems * 4        # two shared objects + input + output: 32 MiB
    path = tmp_path / "chain.pte"
    write_chain(str(path), layers, elems)
    imp = json.loads(run_py(RSS, str(path), "import"))
    direct = json.loads(run_py(RSS, str(path), "direct"))
    assert imp["paths"]["imported"] == W and direct["paths"]["direct"] == W
    assert imp["sum"] == direct["sum"]
    if not default_device().integrated:
        return  # a discrete GPU's driver pins imported pages (measured on an H200: RssAnon grows by W)
    assert imp["load_anon"] < 16 * MiB                 # nothing of W in anonymous memory
    assert imp["run_anon"] < A_IO + 32 * MiB           # A + IO (+ the pipelines' JIT), never W
    assert imp["run_file"] > 0.9 * W                   # the device read the weights as file pages
    if default_device().is_cpu:                        # device memory is host memory: W is anonymous
        assert direct["run_anon"] - imp["run_anon"] > 0.9 * W


CHANGE = r"""
import json, os, resource, sys
import numpy as np
import tests.loader.conftest  # the test ops
from vkx import VkxError
from vkx.loader import load
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
pte, ptd, how, upload = sys.argv[1:5]
with load(pte, [ptd], upload=upload) as p:
    x = np.zeros(p.input_specs[0][0], np.float32)
    before = p.run_numpy(x)[0]
    if how == "replace":     # a new file renamed over the old path (what vkx export does)
        with open(ptd + ".new", "wb") as f:
            f.write(bytes(os.path.getsize(ptd)))
        os.replace(ptd + ".new", ptd)
    elif how in ("overwrite", "overwrite, mtime put back"):  # the same file written in place
        seen = os.stat(ptd)
        with open(ptd, "r+b") as f:
            f.write(bytes(os.path.getsize(ptd)))
        if how != "overwrite":
            os.utime(ptd, ns=(seen.st_atime_ns, seen.st_mtime_ns))
    else:                     # truncated
        os.truncate(ptd, 0)
    try:
        after = p.run_numpy(x)[0]
        print(json.dumps(["ran", bool(np.array_equal(before, after))]))
    except VkxError as error:
        print(json.dumps([type(error).__name__, str(error)]))
"""


def _change(tmp_path, how: str, upload: str) -> list:
    folder = tmp_path / f"{how}-{upload}"
    folder.mkdir()
    path, ext = write_two(folder, N, external="w.ptd")
    return json.loads(run_py(CHANGE, path, ext, how, upload))


@pytest.mark.parametrize("how", ["truncate", "overwrite", "replace"])
def test_a_file_changed_under_a_default_load_changes_nothing(tmp_path, how):
    """upload="auto" copied the weights: a truncated file (SIGBUS, exit 135, when auto imported them
    on lavapipe) or one rewritten or replaced changes no call."""
    assert _change(tmp_path, how, "auto") == ["ran", True]


@needs_import
def test_a_file_changed_under_an_import_is_a_typed_error_at_the_next_call(tmp_path):
    """upload="import": a replaced file changes nothing (the old inode stays mapped); one truncated
    (SIGBUS before) or overwritten in place is a BadFileError at the next call, before the device
    reads a page. The check is the file's size, mtime and ctime (which no one can put back: before,
    a rewrite with its mtime restored went unnoticed), so it holds on every kind of device."""
    assert _change(tmp_path, "replace", "import") == ["ran", True]
    for how in ("truncate", "overwrite", "overwrite, mtime put back"):
        kind, text = _change(tmp_path, how, "import")
        assert kind == "BadFileError" and "w.ptd" in text and "changed" in text, (how, text)


@needs_import
@pytest.mark.parametrize("race", ["before the check", "between the check and the mmap"])
def test_a_file_shrunk_before_it_is_mapped_is_a_typed_error(tmp_path, monkeypatch, race):
    """It was an untyped `ValueError: mmap length is greater than file size` with a traceback."""
    from vkx.format.infile import InputFile
    from vkx.loader.errors import BadFileError
    from vkx.loader.upload.files import FileConstants
    path, ext = write_two(tmp_path, N, external="w.ptd")
    in_place, check = FileConstants.in_place, InputFile.check_unchanged

    def shrink_then_map(self, cid):
        os.truncate(ext, 4096)
        return in_place(self, cid)

    def shrink_after_check(self):
        check(self)
        os.truncate(ext, 4096)
    if race == "before the check":
        monkeypatch.setattr(FileConstants, "in_place", shrink_then_map)
    else:
        monkeypatch.setattr(InputFile, "check_unchanged", shrink_after_check)
    with pytest.raises(BadFileError, match="w.ptd"):
        load(path, [ext], upload="import")


@needs_import
def test_vkx_run_upload_import(tmp_path):
    from typer.testing import CliRunner

    from vkx.cli import app
    path, _ = write_two(tmp_path, N)
    r = CliRunner().invoke(app, ["run", path, "--upload", "import", "--json", "--repeat", "1"])
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert report["upload"] == "import" and report["copies_per_weight_byte"] == 0.0
    (tmp_path / "st").mkdir()
    path, ext = write_two(tmp_path / "st", 1001, external="w.safetensors")  # w1 off the buffer alignment
    r = CliRunner().invoke(app, ["run", path, "--external-data", ext, "--upload", "import"])
    assert r.exit_code == 2 and "alignment" in r.output and "Traceback" not in r.output


@needs_import
def test_memory_budget_does_not_count_imported_weights(tmp_path):
    n = 2 * MiB                                        # 8 MiB tensors: dedicated allocations
    path, _ = write_two(tmp_path, n)                   # W = 16, A = 16, IO = 16 MiB
    budget = 40 * MiB                                  # A + IO fit, W + A + IO does not
    with pytest.raises(OutOfDeviceMemoryError):
        load(path, upload="direct", memory_budget=budget)
    with load(path, upload="import", memory_budget=budget) as p:
        x = np.ones(n, np.float32)
        np.testing.assert_array_equal(p(x), x + weights(n, seed=1) + weights(n, seed=2))
        assert p.ledger.live["weights"] == 0 and p.ledger.live["imported"] == 16 * MiB


@needs_import
def test_an_imported_load_allocates_no_weights_block_for_small_weights(tmp_path):
    """Small constants imported from the file take none of the device's small-weights block (issue 43
    saw `--upload import` allocate 46 MiB for 32 bytes kept on the device; the block was sized for every
    small constant. Not reproduced here on any file; this holds the sizing to what the block keeps)."""
    from vkx.cli import app
    from typer.testing import CliRunner

    path, _ = write_two(tmp_path, 1024)  # 4 KiB constants: under the small-allocation limit
    peaks = {}
    for upload in ("direct", "import"):
        r = CliRunner().invoke(app, ["run", path, "--upload", upload, "--json", "--repeat", "1"])
        assert r.exit_code == 0, r.output
        peaks[upload] = json.loads(r.stdout)["device_peak_bytes"]
    assert peaks["direct"]["weights"] > 0 and peaks["import"]["imported"] > 0
    assert peaks["import"]["weights"] == 0, peaks
