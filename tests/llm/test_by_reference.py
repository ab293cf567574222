"""Weights by reference: a folder exported with `--external-data` naming its checkpoint (docs/format.md,
"Weights by reference"): the .pte holds the program, the checkpoint's tensors are read where they are."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import pytest
import torch

import vkx
from tests.cli.conftest import one_error_line, vkx as run_vkx, vkx_here
from tests.llm.families import write_folder
from vkx.format import validate
from vkx.format.errors import FormatError, MismatchError, MissingFileError, MissingKeyError, VkxError
from vkx.loader.errors import LoadError

pytestmark = pytest.mark.vulkan
PROMPT = [3, 14, 15, 92, 65]
LENGTHS = ["--max-seq-len", 64, "--prefill-len", 8]


def fingerprint(folder: Path) -> dict[str, tuple[str, int]]:
    """Every file of a folder: its sha256 and mtime (ns)."""
    return {p.name: (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(folder.iterdir())}


def checkpoint_tensors(folder: Path) -> dict[str, tuple[str, list[int], int]]:
    """name -> (dtype, shape, bytes) of every tensor in the folder's safetensors files."""
    out = {}
    for path in folder.glob("*.safetensors"):
        n = int.from_bytes(path.read_bytes()[:8], "little")
        for name, info in json.loads(path.read_bytes()[8:8 + n]).items():
            if name != "__metadata__":
                out[name] = (info["dtype"], info["shape"], info["data_offsets"][1] - info["data_offsets"][0])
    return out


def export(root: Path, folder: Path, reference, *args) -> dict:
    before = fingerprint(folder)
    done = vkx_here("export", folder, "-o", root / "lm.pte", "--external-data", reference, *LENGTHS, "--json", *args)
    assert done.returncode == 0, done.stderr
    assert fingerprint(folder) == before  # the checkpoint is read, never written, renamed or touched
    return json.loads(done.stdout)


def greedy(model, prompt: list[int], n: int, eos) -> list[int]:
    out = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False, pad_token_id=0,
                         eos_token_id=eos)
    return out[0, len(prompt):].tolist()


@pytest.fixture(scope="module", params=["llama", "qwen2-sharded"])
def exported(request, tmp_path_factory):
    """(root, folder, model, report): a checkpoint saved by save_pretrained in root/<family>, and
    root/lm.pte exported by reference (Llama: the single file; Qwen2: shards of 64 KB, by the index)."""
    root = tmp_path_factory.mktemp("by_reference")
    family, _, sharded = request.param.partition("-")
    folder = root / family
    model = write_folder(folder, family, weights=True, shard_bytes=64_000 if sharded else None)
    reference = folder / ("model.safetensors.index.json" if sharded else "model.safetensors")
    assert reference.is_file() and (len(list(folder.glob("*.safetensors"))) > 2) == bool(sharded)
    return root, folder, model, export(root, folder, reference)


def test_only_the_program_is_written(exported):
    root, folder, _, report = exported
    stored = checkpoint_tensors(folder)
    # the tied embedding is one key; every tensor is used as stored (fp32 checkpoint, fp32 export)
    assert report["referenced_bytes"] == sum(b for _, _, b in stored.values())
    assert sorted(report["referenced_files"]) == sorted(str(p) for p in folder.glob("*.safetensors"))
    assert report["external_path"] is None and report["file_bytes"] < 64 * 1024
    # what the .pte holds: the mask's slot numbers and the rotary frequencies, never a checkpoint tensor
    assert report["constant_bytes"] < 1024
    assert sorted(p.name for p in root.iterdir()) == sorted([folder.name, "lm.pte"])


def test_inspect_says_where_each_tensor_is(exported):
    root, folder, _, _ = exported
    done = run_vkx("inspect", root / "lm.pte", "--json")
    assert done.returncode == 0, done.stderr
    d = json.loads(done.stdout)
    stored = checkpoint_tensors(folder)
    used = {name: t["file"] for t in d["tensors"] if t["users"] for name in t["names"]}
    assert {name: used[name] for name in stored} == {
        name: str(path) for path in folder.glob("*.safetensors") for name in checkpoint_tensors_of(path)}
    assert {n for n, f in used.items() if f == "pte"} == {"_slots", "model.rotary_emb.inv_freq"}
    files = {f["file"]: (f["tensors"], f["bytes"]) for f in d["files"]}
    assert sum(b for f, (_, b) in files.items() if f != "pte") == sum(b for _, _, b in stored.values())
    assert all(e["recorded"] for e in d["external"])
    # recorded relative to the .pte, so that the two move together
    assert sorted(d["metadata"]["external_files"]) == sorted(f"{folder.name}/{p.name}"
                                                             for p in folder.glob("*.safetensors"))
    human = run_vkx("inspect", root / "lm.pte")
    assert "Weights by file" in human.stdout and "(recorded by the program)" in human.stdout


def test_weights_inside_the_file_keep_the_checkpoint_names(exported, tmp_path):
    """One naming scheme: the folder exported with its weights stored in the .pte names every
    tensor as the by-reference export (and the checkpoint) does, and the piped listing shows them whole."""
    root, folder, _, _ = exported
    done = vkx_here("export", folder, "-o", tmp_path / "inside.pte", *LENGTHS)
    assert done.returncode == 0, done.stderr
    names = {}
    for pte in (root / "lm.pte", tmp_path / "inside.pte"):
        described = json.loads(run_vkx("inspect", pte, "--json").stdout)
        names[pte.name] = {n for t in described["tensors"] if t["users"] for n in t["names"]}
    # the same names, and the tied head's second name (the checkpoint stores the tensor once)
    assert names["lm.pte"] >= set(checkpoint_tensors(folder))
    assert names["lm.pte"] <= names["inside.pte"] and names["inside.pte"] - names["lm.pte"] <= {"lm_head.weight"}
    listed = run_vkx("inspect", tmp_path / "inside.pte", "--tensors").stdout.splitlines()
    projections = [k for k in checkpoint_tensors(folder) if k.endswith("q_proj.weight")]
    assert projections and all(any(k in line for line in listed) for k in projections)


def checkpoint_tensors_of(path: Path) -> list[str]:
    n = int.from_bytes(path.read_bytes()[:8], "little")
    return [k for k in json.loads(path.read_bytes()[8:8 + n]) if k != "__metadata__"]


def test_validate_and_generate_read_the_checkpoint(exported):
    root, folder, model, _ = exported
    before = fingerprint(folder)
    validated = run_vkx("validate", root / "lm.pte")
    assert validated.returncode == 0 and validated.stdout.startswith("ok "), validated.stderr
    done = run_vkx("generate", root / "lm.pte", "--prompt-ids", ",".join(map(str, PROMPT)), "--max-new-tokens", 24,
                   "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["tokens"] == greedy(model, PROMPT, 24, model.config.eos_token_id)
    assert fingerprint(folder) == before  # loading reads the checkpoint where it is and leaves it so


def copy_of(exported, tmp_path) -> tuple[Path, Path]:
    """A copy of the export's root (its .pte and checkpoint folder) to change."""
    root, folder, _, _ = exported
    shutil.copytree(root, tmp_path / "copy")
    return tmp_path / "copy" / "lm.pte", tmp_path / "copy" / folder.name


def rewrite(path: Path, change) -> None:
    """Save the safetensors file again with `change(tensors)` applied."""
    from safetensors.torch import load_file, save_file
    tensors = load_file(str(path))
    change(tensors)
    save_file(tensors, str(path), metadata={"format": "pt"})


def first_weight(folder: Path) -> tuple[Path, str]:
    """A projection weight of the checkpoint and the file holding it."""
    return next((path, k) for path in sorted(folder.glob("*.safetensors")) for k in checkpoint_tensors_of(path)
                if k.endswith("proj.weight"))


@pytest.mark.parametrize("edit, error, match", [
    ("remove", MissingKeyError, "not found in"),
    ("dtype", MismatchError, "is F16 ["),
    ("move", MissingFileError, "is not there"),
])
def test_a_changed_checkpoint_is_a_typed_error(exported, tmp_path, edit, error, match):
    pte, folder = copy_of(exported, tmp_path)
    path, name = first_weight(folder)
    if edit == "remove":
        rewrite(path, lambda t: t.pop(name))
    elif edit == "dtype":
        rewrite(path, lambda t: t.update({name: t[name].half()}))
    else:
        folder.rename(folder.with_name("elsewhere"))
    with pytest.raises(error, match=re.escape(match)):
        validate(pte)
    line = one_error_line(run_vkx("validate", pte))
    assert match in line, line
    assert match in one_error_line(run_vkx("generate", pte, "--prompt-ids", "1,2"))
    # the loader's twin of the format error: a LoadError and a FormatError of the same kind
    loaded = MissingKeyError if error is not MismatchError else FormatError
    with pytest.raises(loaded, match=re.escape(match)) as caught:
        vkx.load(pte)
    assert isinstance(caught.value, LoadError)


def test_a_cast_export_writes_only_the_cast_tensors(tmp_path):
    """An fp32 checkpoint whose norms are stored in fp16, exported --dtype fp16: the norms are
    referenced, the fp32 projections and embedding are cast into the .pte."""
    folder = tmp_path / "llama"
    write_folder(folder, "llama", weights=True)
    rewrite(folder / "model.safetensors",
            lambda t: t.update({k: v.half() for k, v in t.items() if k.endswith("norm.weight")}))
    stored = checkpoint_tensors(folder)
    report = export(tmp_path, folder, folder, "--dtype", "fp16")  # the folder itself names its checkpoint
    half = {k for k, (dtype, _, _) in stored.items() if dtype == "F16"}
    assert half and report["referenced_bytes"] == sum(stored[k][2] for k in half)
    cast = sum(stored[k][2] // 2 for k in stored if k not in half)
    assert cast < report["constant_bytes"] < cast + 1024
    d = json.loads(run_vkx("inspect", tmp_path / "lm.pte", "--json").stdout)
    # the cast copies are numbered: their checkpoint keys name the checkpoint's own tensors
    in_pte = {name.removesuffix(".1") for t in d["tensors"] if t["file"] == "pte" for name in t["names"]}
    assert {k for k in stored if k not in half} <= in_pte and not in_pte & half
    assert {n for t in d["tensors"] if t["file"] != "pte" and t["users"] for n in t["names"]} == half
    assert run_vkx("validate", tmp_path / "lm.pte").returncode == 0
    with vkx.load(tmp_path / "lm.pte") as program:
        assert len(list(program.generate([1, 2, 3], 4))) >= 1


@pytest.mark.parametrize("make, reference, match", [
    (lambda f: write_folder(f, "qwen2", weights=True), "notes.safetensors", "is inside the model folder but is not"),
    (lambda f: write_folder(f, "qwen2", weights=True, shard_bytes=64_000), "model.safetensors",
     "is inside the model folder but is not"),
    (lambda f: write_folder(f, "qwen2"), ".", "has no checkpoint to reference"),
    (lambda f: write_folder(f, "qwen2"), "model.safetensors", "has no checkpoint to reference"),
])
def test_bad_spellings_are_one_error_line(tmp_path, make, reference, match):
    folder = tmp_path / "m"
    make(folder)
    before = fingerprint(folder)
    line = one_error_line(run_vkx("export", folder, "-o", tmp_path / "x.pte", "--external-data",
                                  folder / reference, *LENGTHS))
    assert match in line, line
    assert fingerprint(folder) == before and not (tmp_path / "x.pte").exists()


def test_a_legacy_layout_cannot_reference(tmp_path):
    folder = tmp_path / "m"
    write_folder(folder, "qwen2", weights=True)
    line = one_error_line(run_vkx("export", folder, "-o", tmp_path / "x.pte", "--external-data",
                                  folder / "model.safetensors", "--layout", "legacy", *LENGTHS))
    assert "needs the named layout" in line
    assert issubclass(MissingFileError, VkxError) and issubclass(MismatchError, VkxError)
    assert os.listdir(tmp_path) == ["m"]


def test_a_bf16_checkpoint_exported_as_bf16_is_all_referenced(tmp_path):
    """Sharded, and named by one of its shards: every shard is referenced, every checkpoint tensor is
    used as stored (matrices and norms stay bf16: vkx.export.widen); the .pte holds only what the
    wrapper computes (slot numbers, rotary frequencies)."""
    folder = tmp_path / "qwen3"
    write_folder(folder, "qwen3", weights=True, shard_bytes=40_000)
    shards = sorted(folder.glob("*.safetensors"))
    assert len(shards) > 2
    for shard in shards:
        rewrite(shard, lambda t: t.update({k: v.bfloat16() for k, v in t.items()}))
    stored = checkpoint_tensors(folder)
    assert {dtype for dtype, _, _ in stored.values()} == {"BF16"}
    report = export(tmp_path, folder, shards[-1], "--dtype", "bf16")
    assert report["referenced_bytes"] == sum(b for _, _, b in stored.values())
    assert sorted(report["referenced_files"]) == [str(p) for p in shards]
    assert report["constant_bytes"] < 1024 and report["file_bytes"] < 128 * 1024
    assert run_vkx("validate", tmp_path / "lm.pte").returncode == 0
