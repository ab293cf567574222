"""The on-disk VkPipelineCache: a second process's pipelines come from it; a corrupt, truncated or
foreign file is ignored and replaced; creating pipelines the driver compiles is said on stderr."""
from __future__ import annotations

import hashlib
import struct

import pytest
import vulkan as vk

from vkx.loader.gpu import pipeline_cache, shaders
from vkx.loader.gpu.device import Device
from vkx.loader.gpu.pipeline_cache import DRIVER_HEADER, Identity

ME = Identity(0x10de, 0x2335, bytes(range(16)))


def _driver_data(identity: Identity, body: bytes = b"compiled code") -> bytes:
    return DRIVER_HEADER.pack(DRIVER_HEADER.size, vk.VK_PIPELINE_CACHE_HEADER_VERSION_ONE, identity.vendor_id,
                              identity.device_id, identity.uuid) + body


def test_round_trip_and_every_bad_file_refused():
    keys = frozenset({b"k" * 16, b"j" * 16})
    blob = pipeline_cache.pack(keys, _driver_data(ME))
    assert pipeline_cache.unpack(blob, ME) == (keys, _driver_data(ME))
    for cut in range(len(blob)):  # truncated anywhere
        assert pipeline_cache.unpack(blob[:cut], ME) is None, cut
    for at in range(len(blob)):  # any byte changed
        bad = bytearray(blob)
        bad[at] ^= 0x40
        assert pipeline_cache.unpack(bytes(bad), ME) is None, at
    for other in (Identity(0x1002, ME.device_id, ME.uuid), Identity(ME.vendor_id, 1, ME.uuid),
                  Identity(ME.vendor_id, ME.device_id, bytes(16))):  # another device or driver
        assert pipeline_cache.unpack(pipeline_cache.pack(keys, _driver_data(other)), ME) is None
        assert pipeline_cache.unpack(blob, other) is None
    wrong_version = bytearray(_driver_data(ME))
    wrong_version[4] = 2
    assert pipeline_cache.unpack(pipeline_cache.pack(keys, bytes(wrong_version)), ME) is None
    short_header = struct.pack("<I", 8) + _driver_data(ME)[4:]
    assert pipeline_cache.unpack(pipeline_cache.pack(keys, short_header), ME) is None
    assert pipeline_cache.unpack(b"", ME) is None


def _pipelines_in_a_new_process(capsys) -> tuple[shaders.Pipelines, str]:
    """A device of its own (as a second process has), its cache loaded; the pipeline created."""
    device = Device()
    cache = shaders.Pipelines(device)
    cache.get_all([("test_relu", {}, 2)])
    said = capsys.readouterr().err
    device.close()  # closes the pipelines, writing what is new
    return cache, said


@pytest.mark.vulkan
def test_second_process_compiles_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first, said = _pipelines_in_a_new_process(capsys)
    assert said.startswith("vkx: compiled 1 compute pipeline for ") and said.count("\n") == 1
    assert "the driver keeps none" in said or "kept by the driver" in said  # what the cache holds, said
    path = pipeline_cache.cache_path(first._identity)
    kept = pipeline_cache.read(first._identity)
    assert path.parent == tmp_path / "vkx" / "pipelines" and kept is not None and len(kept[0]) == 1
    written = path.read_bytes()
    second, said = _pipelines_in_a_new_process(capsys)
    assert said == "" and second._kept == kept[0]
    assert path.read_bytes() == written  # nothing new: not rewritten


@pytest.mark.vulkan
@pytest.mark.parametrize("damage", ["truncated", "corrupt", "foreign", "garbage"])
def test_a_bad_file_is_ignored_and_replaced(tmp_path, monkeypatch, capsys, damage):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first, _ = _pipelines_in_a_new_process(capsys)
    path = pipeline_cache.cache_path(first._identity)
    blob = path.read_bytes()
    if damage == "truncated":
        bad = blob[:len(blob) // 2]
    elif damage == "corrupt":  # a flipped byte in the driver's data, its header intact
        bad = bytearray(blob)
        bad[-1] ^= 0xFF
        bad = bytes(bad)
    elif damage == "foreign":  # another driver's data, with a digest that checks out
        keys, data = pipeline_cache.unpack(blob, first._identity)
        data = data[:16] + bytes(b ^ 0xFF for b in data[16:32]) + data[32:]
        bad = pipeline_cache.pack(keys, data)
    else:
        bad = hashlib.sha256(b"x").digest() * 50
    path.write_bytes(bad)
    _, said = _pipelines_in_a_new_process(capsys)
    assert said.startswith("vkx: compiled 1 compute pipeline")  # the driver compiled it again
    assert pipeline_cache.read(first._identity) is not None  # replaced by a good one


@pytest.mark.vulkan
def test_unwritable_cache_folder_is_no_error(tmp_path, monkeypatch, capsys):
    (tmp_path / "vkx").write_text("a file where the folder would be")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    _, said = _pipelines_in_a_new_process(capsys)
    assert said.startswith("vkx: compiled 1 compute pipeline")
