"""Atomic writes: a failed or killed write leaves no temp file and keeps what was there; errors name the target."""
from __future__ import annotations

import errno
import fcntl
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from vkx.format import WriteError, validate
from vkx.format import atomic

from .fmt_tiny import write_tiny

ROOT = Path(__file__).resolve().parents[2]


def _old_pair(tmp_path):
    (tmp_path / "m.pte").write_bytes(b"old pte")
    (tmp_path / "m.ptd").write_bytes(b"old ptd")


def _failing_pte_replace(monkeypatch):
    real = os.replace

    def replace(src, dst):
        if str(dst).endswith(".pte"):
            raise PermissionError(errno.EPERM, "Operation not permitted", str(src), str(dst))
        return real(src, dst)
    monkeypatch.setattr(atomic.os, "replace", replace)


@pytest.mark.parametrize("hard_links", [True, False])
def test_pte_commit_failure_keeps_the_old_external_file(tmp_path, monkeypatch, hard_links):
    _old_pair(tmp_path)
    _failing_pte_replace(monkeypatch)
    if not hard_links:  # a filesystem without hard links: the old file is moved aside, then back
        def no_link(*args, **kwargs):
            raise OSError(errno.EPERM, "Operation not permitted")
        monkeypatch.setattr(atomic.os, "link", no_link)
        monkeypatch.delattr(atomic.os, "O_TMPFILE")
    with pytest.raises(WriteError) as info:
        write_tiny(tmp_path / "m.pte", external_data=tmp_path / "m.ptd")
    assert sorted(os.listdir(tmp_path)) == ["m.ptd", "m.pte"]
    assert (tmp_path / "m.pte").read_bytes() == b"old pte" and (tmp_path / "m.ptd").read_bytes() == b"old ptd"
    assert str(info.value).startswith(f"{tmp_path / 'm.pte'}: cannot write: ") and ".tmp" not in str(info.value)


def test_successful_write_replaces_both_and_leaves_no_backup(tmp_path):
    _old_pair(tmp_path)
    write_tiny(tmp_path / "m.pte", external_data=tmp_path / "m.ptd")
    assert sorted(os.listdir(tmp_path)) == ["m.ptd", "m.pte"]
    validate(tmp_path / "m.pte", [tmp_path / "m.ptd"])


def test_new_file_gets_the_umask_mode(tmp_path):
    old = os.umask(0o027)
    try:
        write_tiny(tmp_path / "m.pte")
    finally:
        os.umask(old)
    assert (tmp_path / "m.pte").stat().st_mode & 0o777 == 0o640


def test_disk_full_names_the_target(tmp_path, monkeypatch):
    (tmp_path / "m.pte").write_bytes(b"old")
    real = os.write

    def write(fd, data):
        if len(data) > 64:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data)
    monkeypatch.setattr(atomic.os, "write", write)
    with pytest.raises(WriteError) as info:
        write_tiny(tmp_path / "m.pte")
    assert info.value.errno == errno.ENOSPC and isinstance(info.value, OSError)
    assert str(info.value) == f"{tmp_path / 'm.pte'}: cannot write: No space left on device"
    assert os.listdir(tmp_path) == ["m.pte"] and (tmp_path / "m.pte").read_bytes() == b"old"


def test_immutable_target_names_the_target(tmp_path):
    target = tmp_path / "m.pte"
    target.write_bytes(b"old")
    if subprocess.run(["chattr", "+i", str(target)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here (needs root and a filesystem that has it)")
    try:
        with pytest.raises(WriteError) as info:
            write_tiny(target)
    finally:
        subprocess.run(["chattr", "-i", str(target)], check=True)
    assert str(info.value) == f"{target}: cannot write: Operation not permitted"
    assert os.listdir(tmp_path) == ["m.pte"] and target.read_bytes() == b"old"


def test_directory_at_the_target_names_the_target(tmp_path):
    (tmp_path / "m.pte").mkdir()
    with pytest.raises(WriteError) as info:
        write_tiny(tmp_path / "m.pte")
    assert str(info.value).startswith(f"{tmp_path / 'm.pte'}: cannot write: ") and ".tmp" not in str(info.value)
    assert os.listdir(tmp_path) == ["m.pte"]


# A writer that has written 8 MiB of its temp file and then waits inside the next payload's read().
KILLED = r"""
import os, sys, time
from vkx.format import ConstantPayload, IOSpec, ScalarType, write_program
from vkx.format import vkgraph as vk
if sys.argv[2] == "named":
    del os.O_TMPFILE  # as on a filesystem without O_TMPFILE: the temp file has a name throughout
n = 8 << 20
def wait():
    print("writing", flush=True)
    time.sleep(60)
    return bytes(n)
values = [vk.Tensor(vk.DataType.FLOAT32, (1,), mem_obj_id=0),
          vk.Tensor(vk.DataType.UINT8, (n,), constant_id=0), vk.Tensor(vk.DataType.UINT8, (n,), constant_id=1)]
graph = vk.VkGraph(values=values, input_ids=[0], output_ids=[0])
payloads = [ConstantPayload("a", n, lambda: bytes(n)), ConstantPayload("b", n, wait)]
io = [IOSpec(ScalarType.FLOAT, (1,))]
write_program(sys.argv[1], graph, payloads, io, io)
"""


def _kill_mid_write(path: Path, sig: int, mode: str) -> list[str]:
    # the signal's default action in the writer, even where this run ignores it (under nohup, SIGHUP
    # is ignored and a child inherits that)
    default = (lambda: signal.signal(sig, signal.SIG_DFL)) if sig != signal.SIGKILL else None
    proc = subprocess.Popen([sys.executable, "-c", KILLED, str(path), mode], cwd=ROOT, stdout=subprocess.PIPE,
                            text=True, preexec_fn=default)
    try:
        assert proc.stdout.readline() == "writing\n"
        os.kill(proc.pid, sig)
        assert proc.wait(timeout=30) == -sig
    finally:
        proc.kill()
        proc.wait()
    return sorted(os.listdir(path.parent))


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGHUP])
def test_killed_write_leaves_no_temp_file(tmp_path, sig):
    (tmp_path / "m.pte").write_bytes(b"old")
    assert _kill_mid_write(tmp_path / "m.pte", sig, "anonymous") == ["m.pte"]
    assert (tmp_path / "m.pte").read_bytes() == b"old"


def test_next_write_removes_temp_files_of_dead_writers_only(tmp_path):
    left = [n for n in _kill_mid_write(tmp_path / "m.pte", signal.SIGKILL, "named") if n.endswith(".tmp")]
    assert len(left) == 1 and (tmp_path / left[0]).stat().st_size >= 8 << 20
    live = tmp_path / ".m.pte.0123abcd.tmp"  # another writer of the same target, still at work
    fd = os.open(live, os.O_WRONLY | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    other = tmp_path / ".n.pte.89abcdef.tmp"  # a dead writer of another target
    other.write_bytes(b"x")
    try:
        write_tiny(tmp_path / "m.pte")
        assert sorted(os.listdir(tmp_path)) == [live.name, other.name, "m.pte"]
    finally:
        os.close(fd)
    validate(tmp_path / "m.pte")


# A writer of a .pte + .ptd pair killed between its two renames: the .ptd is in place, its old
# bytes are still under a second name, and the .pte is not yet renamed.
KILLED_BETWEEN = r"""
import os, signal, sys
sys.path.insert(0, "tests/format")
from fmt_tiny import write_tiny
from vkx.format import atomic
real = os.replace
def replace(src, dst):
    if str(dst).endswith(".pte"):
        os.kill(os.getpid(), signal.SIGKILL)
    return real(src, dst)
atomic.os.replace = replace
write_tiny(sys.argv[1], external_data=sys.argv[2])
"""


def test_a_writer_killed_between_the_renames_leaves_an_old_file_the_next_write_removes(tmp_path):
    _old_pair(tmp_path)
    pte, ptd = tmp_path / "m.pte", tmp_path / "m.ptd"
    proc = subprocess.run([sys.executable, "-c", KILLED_BETWEEN, str(pte), str(ptd)], cwd=ROOT)
    assert proc.returncode == -signal.SIGKILL
    left = sorted(os.listdir(tmp_path))
    assert [n for n in left if n.endswith(".old")] and [n for n in left if n.endswith(".tmp")], left
    live = tmp_path / ".m.ptd.0123abcd.old"  # kept by a writer of the same pair, still at work
    live.write_bytes(b"x")
    fd = os.open(live, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        write_tiny(pte, external_data=ptd)
        assert sorted(os.listdir(tmp_path)) == [live.name, "m.ptd", "m.pte"]
    finally:
        os.close(fd)
    validate(pte, [ptd])
