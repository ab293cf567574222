"""Files that cannot hurt: what `vkx export` replaces, and what a load takes as a .pte/.ptd pair
(docs/format.md, "Pair identity"); a pipeline cache file that is no cache file is not read."""
from __future__ import annotations

import os
import resource
import subprocess
import time
from pathlib import Path

import pytest

from vkx.loader.gpu import pipeline_cache
from vkx.loader.gpu.pipeline_cache import DRIVER_HEADER, Identity

from .conftest import EXAMPLES, VKX, one_error_line, vkx, vkx_here

MLP = (EXAMPLES / "mlp.py").read_text()


def model(path: Path, source: str = MLP) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    return path


def test_a_model_file_that_is_not_python_is_refused(tmp_path):
    """`vkx export mlp.txt` ran it and replaced mlp.pte, which mlp.py's export had written."""
    text = model(tmp_path / "mlp.txt")
    (tmp_path / "mlp.pte").write_bytes(b"the program of mlp.py")
    before = sorted(os.listdir(tmp_path))
    line = one_error_line(vkx("export", text))
    assert line == (f"vkx: error: {text} is not a Python file: vkx export takes a .py file defining get_model(), "
                    "or a Hugging Face model folder")
    assert sorted(os.listdir(tmp_path)) == before and (tmp_path / "mlp.pte").read_bytes() == b"the program of mlp.py"


def test_the_default_output_replaces_only_a_program_exported_from_the_model(tmp_path):
    mlp = model(tmp_path / "mlp.py")
    mine = tmp_path / "mlp.pte"
    mine.write_bytes(b"a file of your own")
    line = one_error_line(vkx("export", mlp, "-q"))
    assert line == f"vkx: error: {mine} exists and was not exported from {mlp}: pass -o {mine} to replace it"
    assert mine.read_bytes() == b"a file of your own"
    asked = vkx_here("export", mlp, "-q", "-o", mine)  # told to: replaced
    assert asked.returncode == 0 and "(replaced the existing file)" in asked.stdout, asked.stderr
    again = vkx_here("export", mlp, "-q")  # its own export: replaced without being told
    assert again.returncode == 0 and "(replaced the existing file)" in again.stdout, again.stderr
    other = model(tmp_path / "other" / "mlp.py")
    assert vkx_here("export", other, "-q", "-o", mine).returncode == 0  # now another model's program
    assert one_error_line(vkx("export", mlp, "-q")).startswith(f"vkx: error: {mine} exists and was not exported")


HOLD = """
import os, time
hold = os.environ.get("VKX_TEST_HOLD")
if hold:  # stop between the .ptd's rename and the .pte's until told to go on
    replace = os.replace
    def held(src, dst, *args, **kwargs):
        if str(dst).endswith(".pte"):
            open(os.path.join(hold, "held"), "w").close()
            while not os.path.exists(os.path.join(hold, "go")):
                time.sleep(0.05)
        return replace(src, dst, *args, **kwargs)
    os.replace = held
"""


def _waits_for_a_lock(pid: int) -> bool:
    return any(" -> " in line and f" {pid} " in line for line in Path("/proc/locks").read_text().splitlines())


def test_two_exports_to_one_output_never_mix_their_pte_and_ptd(tmp_path):
    """Both exited 0, and a .pte of one could be left with the .ptd of the other: here the first stops
    between its two renames while the second one writes its pair, which then waits for it."""
    first_model = model(tmp_path / "first.py")
    second_model = model(tmp_path / "second.py", MLP.replace("hidden: int = 256", "hidden: int = 128"))
    out, ext, hold = tmp_path / "m.pte", tmp_path / "m.ptd", tmp_path / "hold"
    model(tmp_path / "hook" / "sitecustomize.py", HOLD)
    hold.mkdir()
    env = {**os.environ, "VKX_VALIDATION": "1",
           "PYTHONPATH": os.pathsep.join([str(tmp_path / "hook"), *filter(None, [os.environ.get("PYTHONPATH")])])}
    args = ["export", "-q", "-o", out, "--external-data", ext]
    first = subprocess.Popen([VKX, args[0], first_model, *args[1:]], env={**env, "VKX_TEST_HOLD": str(hold)},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not (hold / "held").exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (hold / "held").exists(), first.communicate()
    # --force: the .ptd there now is the first export's, whose .pte is not there yet
    second = subprocess.Popen([VKX, args[0], second_model, *args[1:], "--force"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while second.poll() is None and not _waits_for_a_lock(second.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    (hold / "go").touch()
    for done in (first, second):
        stdout, stderr = done.communicate(timeout=300)
        assert done.returncode == 0, stderr
    checked = vkx("validate", out)
    assert checked.returncode == 0 and checked.stdout.startswith("ok "), checked.stderr


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> Path:
    """a/m.pte + a/m.ptd and o.pte + o.ptd: two exports of one architecture, other weights."""
    folder = tmp_path_factory.mktemp("pairs")
    for name, seed in (("a/m", 0), ("o", 1)):
        source = model(folder / f"{name}.py", MLP.replace("manual_seed(0)", f"manual_seed({seed})"))
        done = vkx_here("export", source, "-q", "--external-data", folder / f"{name}.ptd")
        assert done.returncode == 0, done.stderr
    return folder


@pytest.mark.vulkan
def test_run_refuses_external_data_written_with_another_program(pairs):
    """It ran a/m.pte with o.ptd's weights (same keys, same shapes) and said nothing."""
    line = one_error_line(vkx("run", pairs / "a" / "m.pte", "--external-data", pairs / "o.ptd", "--repeat", "0"))
    assert f"{pairs / 'o.ptd'} is not the external data written with this program" in line, line
    assert vkx("run", pairs / "a" / "m.pte", "--external-data", pairs / "a" / "m.ptd", "--repeat", "0").returncode == 0


@pytest.mark.vulkan
def test_a_symlinked_pte_runs_with_the_ptd_written_with_it(pairs, tmp_path):
    """`b/link.pte -> a/m.pte` took b/link.ptd, whatever that was; its data is a/m.ptd, beside its target."""
    link = tmp_path / "link.pte"
    link.symlink_to(pairs / "a" / "m.pte")
    (tmp_path / "link.ptd").write_bytes((pairs / "o.ptd").read_bytes())
    done = vkx("run", link, "--repeat", "0")
    assert done.returncode == 0, done.stderr
    assert f"vkx: using external data {pairs / 'a' / 'm.ptd'} (found beside {link})" in done.stderr
    one_error_line(vkx("run", link, "--external-data", tmp_path / "link.ptd", "--repeat", "0"))


def _as_cache_file(path: Path, kind: str) -> None:
    if kind == "symlink to /dev/zero":
        path.symlink_to("/dev/zero")
    elif kind == "FIFO":
        os.mkfifo(path)
    else:  # huge (sparse: it takes no disk)
        with open(path, "wb") as f:
            f.truncate(64 << 30)


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))  # what reading /dev/zero would take instead


@pytest.mark.vulkan
@pytest.mark.parametrize("kind", ["symlink to /dev/zero", "FIFO", "huge"])
def test_a_pipeline_cache_that_is_no_cache_file_is_not_read(pairs, tmp_path, kind):
    """A cache file the process would hang on (a FIFO) or read without end (/dev/zero, 64 GiB) is ignored."""
    cache = tmp_path / "cache"
    env = {**os.environ, "VKX_VALIDATION": "1", "XDG_CACHE_HOME": str(cache)}
    first = subprocess.run([VKX, "run", pairs / "o.pte", "--repeat", "0"], capture_output=True, text=True,
                           timeout=300, env=env)
    assert first.returncode == 0, first.stderr
    (written,) = (cache / "vkx" / "pipelines").iterdir()  # named after the device and its driver
    written.unlink()
    _as_cache_file(written, kind)
    done = subprocess.run([VKX, "run", pairs / "o.pte", "--repeat", "1"], capture_output=True, text=True,
                          timeout=120, env=env, preexec_fn=_limit_memory)
    assert done.returncode == 0, done.stderr


def test_what_the_driver_keeps_is_said_as_it_is(tmp_path, monkeypatch):
    """lavapipe's cache data is its 32-byte header: the pipelines are not kept, whatever the file."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    me = Identity(0x10005, 0, bytes(16))
    header = DRIVER_HEADER.pack(DRIVER_HEADER.size, 1, me.vendor_id, me.device_id, me.uuid)
    assert pipeline_cache.held(me, header) == "the driver keeps none: its cache data is 32 B"
    assert pipeline_cache.held(me, header + bytes(5000)) == (f"kept by the driver: 5,032 B in "
                                                            f"{pipeline_cache.cache_path(me)}")


@pytest.mark.vulkan
@pytest.mark.parametrize("command", [["export", "mlp.py", "-o", "new.pte"], ["run", "mlp.pte", "--repeat", "1"],
                                     ["devices"], ["inspect", "mlp.pte"], ["validate", "mlp.pte"]])
def test_a_700_mib_address_space_gets_a_line_or_an_answer(pairs, tmp_path, command):
    """Under `ulimit -v` 700 MiB the commands that read files answer (three tracebacks before: can't start
    new thread); those whose native code may end the process there are refused in one line, before it
    runs: an export (torch aborted: std::bad_alloc), a command that opens a Vulkan device (lavapipe
    double-freed inside vkCreateDevice in 2 of 12 runs, NVIDIA's driver ended with code 130 and no line)."""
    (tmp_path / "mlp.py").write_text((EXAMPLES / "mlp.py").read_text())
    (tmp_path / "mlp.pte").write_bytes((pairs / "o.pte").read_bytes())
    (tmp_path / "mlp.ptd").write_bytes((pairs / "o.ptd").read_bytes())
    limit = 700 << 20
    done = subprocess.run([VKX, *command], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "VKX_VALIDATION": "1"},
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))
    needs = {"export": "torch", "run": "the Vulkan driver", "devices": "the Vulkan driver"}.get(command[0])
    if needs is not None:
        assert one_error_line(done) == (f"vkx: error: vkx {command[0]} needs an address space of at least 1.0 GiB "
                                        f"for {needs}; ulimit -v allows 700.0 MiB")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["mlp.ptd", "mlp.pte", "mlp.py"]
    else:
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr


def test_an_output_name_of_255_bytes_is_written_and_replaced(tmp_path):
    """The filesystem takes a 255-byte name; the temp and kept-old names beside it were 14 bytes longer
    ("File name too long") until they took the name's digest past the folder's limit."""
    source = model(tmp_path / "m.py")
    stem = "x" * 251
    for _ in range(2):  # written, then written over (the old .ptd kept under a second name meanwhile)
        done = vkx("export", source, "-o", tmp_path / f"{stem}.pte", "--external-data", tmp_path / f"{stem}.ptd")
        assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["m.py", f"{stem}.pte", f"{stem}.ptd"])
