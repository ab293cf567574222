import pytest

from vkx.loader.gpu import shaders
from vkx.loader.gpu.device import default_device
from vkx.loader.errors import ShaderError


def test_spirv_cache_and_pipeline_reuse(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    spv = shaders.compile_spirv("test_relu", {"X": 1})
    assert spv[:4] == b"\x03\x02\x23\x07"  # SPIR-V magic, little endian
    files = list((tmp_path / "vkx" / "spirv").glob("test_relu-*.spv"))
    assert len(files) == 1
    assert shaders.compile_spirv("test_relu", {"X": 1}) == spv
    cache = shaders.pipelines_for(default_device())
    assert cache.get("test_relu", {"X": 1}, 2) is cache.get("test_relu", {"X": 1}, 2)


def test_without_glslc_only_cached_spirv(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    spv = shaders.compile_spirv("test_relu", {"Y": 2})
    monkeypatch.setattr(shaders, "_glslc_version", "")
    assert shaders.compile_spirv("test_relu", {"Y": 2}) == spv
    with pytest.raises(ShaderError, match="glslc is not available"):
        shaders.compile_spirv("test_relu", {"Y": 3})


def test_compile_error_is_typed(tmp_path, monkeypatch):
    (tmp_path / "broken_x.comp").write_text("#version 450\nvoid main() { nope; }\n")
    monkeypatch.setenv("VKX_SHADER_PATH", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with pytest.raises(ShaderError, match="glslc failed"):
        shaders.compile_spirv("broken_x")
