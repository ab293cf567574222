"""A .pte and the external data written with it share an identity, the data digest (docs/format.md,
"Pair identity"): a .pte takes no .ptd / .safetensors that another write made, whichever way the two
got mixed (two writes of one pair at once, a writer killed between its renames, a symlinked .pte)."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from vkx.format import ConstantPayload, ExternalData, IOSpec, ProgramFile, ScalarType, validate, write_program
from vkx.format import atomic
from vkx.format.errors import MismatchError
from vkx.format.external import DIGEST_KEY, find_external

from .conftest import DATA, GOLDEN
from .fmt_tiny import tiny_constants, tiny_graph, tiny_payloads, write_tiny

EXTS = ["ptd", "safetensors"]
OTHER_PYTREE = "other in"


def write_other(path: Path, external: Path):
    """The tiny program with other weights under the same keys, and another pytree string (another
    export of the same model, by another vkx)."""
    other = [ConstantPayload(p.key, p.nbytes, lambda n=p.nbytes: bytes(range(n))) for p in tiny_payloads()]
    return write_program(path, tiny_graph(), other, [IOSpec(ScalarType.FLOAT, (1, 4))],
                         [IOSpec(ScalarType.FLOAT, (1, 3))], pytree_in=OTHER_PYTREE, pytree_out="out",
                         external_data=external)


def written_by_one_writer(pte: Path, ptd: Path) -> bool:
    """Whether the .pte and the .ptd come from one write (by their contents alone: the .pte's pytree
    string, the .ptd's weights)."""
    other_pte = OTHER_PYTREE.encode() in pte.read_bytes()
    other_ptd = tiny_constants()[0] not in ptd.read_bytes()
    return other_pte == other_ptd


def digests(pte: Path, external: Path) -> tuple[str | None, str | None]:
    with ProgramFile.open(pte) as pf, ExternalData.open(external) as ext:
        return pf.metadata.external_digest, ext.digest


@pytest.mark.parametrize("ext", EXTS)
def test_both_files_record_the_digest_of_the_data(tmp_path, ext):
    external = tmp_path / f"m.{ext}"
    write_tiny(tmp_path / "m.pte", external_data=external)
    recorded, held = digests(tmp_path / "m.pte", external)
    data = external.read_bytes()
    if ext == "ptd":  # the sha256 of every byte before its own segment, the file's last 32
        assert data[-32:].hex() == held and hashlib.sha256(data[:-32]).hexdigest() == held
    else:  # the sha256 of the file with the digest's hex digits as zeros
        assert data.count(held.encode()) == 1
        assert hashlib.sha256(data.replace(held.encode(), b"0" * 64)).hexdigest() == held
    assert recorded == held
    with ExternalData.open(external) as e:
        assert DIGEST_KEY not in e.named_data  # the file's identity, not a tensor
    write_tiny(tmp_path / "again.pte", external_data=tmp_path / f"again.{ext}")
    assert digests(tmp_path / "again.pte", tmp_path / f"again.{ext}") == (held, held)  # same bytes, same digest


@pytest.mark.parametrize("ext", EXTS)
def test_another_writes_external_data_is_refused(tmp_path, ext):
    write_tiny(tmp_path / "a.pte", external_data=tmp_path / f"a.{ext}")
    write_other(tmp_path / "b.pte", tmp_path / f"b.{ext}")
    assert validate(tmp_path / "a.pte", [tmp_path / f"a.{ext}"]).constants == 3
    with pytest.raises(MismatchError, match=f"b.{ext} is not the external data written with this program"):
        validate(tmp_path / "a.pte", [tmp_path / f"b.{ext}"])


def test_files_that_record_no_digest_are_read_as_before(tmp_path):
    """ExecuTorch's own pair, a .pte that records no digest with a file that does (it references a
    vkx-written safetensors as a checkpoint), and a file of the user's own with the right keys."""
    assert validate(DATA / "et_mlp_ext.pte", [DATA / "et_mlp_ext.ptd"]).constants
    with ExternalData.open(GOLDEN / "tiny_st.safetensors") as st:
        assert st.digest is not None
    assert validate(GOLDEN / "tiny_ref.pte").constants == 3
    write_tiny(tmp_path / "m.pte", external_data=tmp_path / "m.ptd")
    weight, bias, _ = tiny_payloads()
    save_file({weight.key: np.frombuffer(weight.read(), np.float32).reshape(3, 4),
               bias.key: np.frombuffer(bias.read(), np.float32)}, tmp_path / "own.safetensors")
    assert validate(tmp_path / "m.pte", [tmp_path / "own.safetensors"]).constants == 3


KILL_BETWEEN_RENAMES = """
import os, signal, sys
from pathlib import Path
sys.path.insert(0, {root!r})
from tests.format.test_pair_identity import write_other
replace = os.replace
def die_before_the_pte(src, dst, *args, **kwargs):
    if str(dst).endswith(".pte"):
        os.kill(os.getpid(), signal.SIGKILL)
    return replace(src, dst, *args, **kwargs)
os.replace = die_before_the_pte
write_other(Path({pte!r}), Path({ptd!r}))
"""


def test_a_writer_killed_between_its_renames_leaves_a_pair_that_is_refused(tmp_path):
    pte, ptd = tmp_path / "m.pte", tmp_path / "m.ptd"
    write_tiny(pte, external_data=ptd)
    old_pte = pte.read_bytes()
    script = KILL_BETWEEN_RENAMES.format(root=str(Path(__file__).resolve().parents[2]), pte=str(pte), ptd=str(ptd))
    killed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert killed.returncode == -9, killed.stderr
    assert pte.read_bytes() == old_pte and not written_by_one_writer(pte, ptd)  # the old program, the new .ptd
    with pytest.raises(MismatchError, match="m.ptd is not the external data written with this program"):
        validate(pte, [ptd])


def test_two_writes_of_one_pair_never_mix_their_files(tmp_path, monkeypatch):
    """The first writer stops between its two renames; the second one, all of whose write comes then,
    waits for it (a lock on the folder) instead of putting its .ptd under the first one's .pte."""
    pte, ptd = tmp_path / "m.pte", tmp_path / "m.ptd"
    go = threading.Event()
    replace = os.replace

    def held_between_renames(src, dst, *args, **kwargs):
        if threading.current_thread().name == "first" and str(dst).endswith(".pte"):
            go.wait(30)
        return replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(atomic.os, "replace", held_between_renames)
    first = threading.Thread(target=write_tiny, args=(pte,), kwargs={"external_data": ptd}, name="first")
    first.start()
    while not ptd.exists() and first.is_alive():  # the first .ptd is in place, its .pte not yet
        first.join(0.01)
    assert ptd.exists()
    second = threading.Thread(target=write_other, args=(pte, ptd), name="second")
    second.start()
    second.join(2)  # done by now unless it waits for the first writer
    go.set()
    first.join()
    second.join()
    assert written_by_one_writer(pte, ptd)
    assert validate(pte, [ptd]).constants == 3


def test_a_symlinked_pte_means_the_external_data_beside_its_target(tmp_path):
    """`b/link.pte -> a/m.pte`: the pair was written in a/, so a/m.ptd is its data, not b/link.ptd."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    write_tiny(tmp_path / "a" / "m.pte", external_data=tmp_path / "a" / "m.ptd")
    write_other(tmp_path / "b" / "other.pte", tmp_path / "b" / "link.ptd")
    link = tmp_path / "b" / "link.pte"
    link.symlink_to(Path("..") / "a" / "m.pte")
    with ProgramFile.open(link) as pf:
        assert find_external(pf) == ([tmp_path / "a" / "m.ptd"], tmp_path / "a" / "m.ptd")
    assert validate(link, [tmp_path / "a" / "m.ptd"]).constants == 3
    with pytest.raises(MismatchError):
        validate(link, [tmp_path / "b" / "link.ptd"])
