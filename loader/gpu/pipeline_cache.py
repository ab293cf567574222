"""The driver's compiled pipelines kept on disk between processes (a `VkPipelineCache` per device).

One file per device and driver, named by the device's vendor id, device id and
`pipelineCacheUUID` (which a driver changes whenever its compiled code would), under
$XDG_CACHE_HOME/vkx/pipelines (or ~/.cache/vkx/pipelines). The file wraps the driver's data:

    magic b"VKXPIPE1" | sha256 of the rest (32 bytes) | uint32 key count | 16-byte keys |
    uint32 data length | the driver's data (its VkPipelineCacheHeaderVersionOne first)

The keys name the pipelines whose code the data holds (`pipeline_key`), so a process knows which
pipelines it will create without the driver compiling them. A file is used only when all of it
checks out: the magic, the lengths, the digest, and the driver header's size, version, vendor,
device and UUID against this device; anything else (corrupt, truncated, another device's or
driver's) is ignored, never handed to the driver. Only a regular file of at most `MAX_BYTES` is read
at all: a symlink (to /dev/zero, say), a FIFO or a huge file is ignored without a read. Writing is
atomic (a temporary file renamed over the old one), and a cache folder that cannot be written is no
error. The driver's data may be its header alone (lavapipe keeps no pipelines): `held` says so.
"""
from __future__ import annotations

import hashlib
import os
import stat
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path

import vulkan as vk

MAGIC = b"VKXPIPE1"
KEY_BYTES = 16
_COUNT = struct.Struct("<I")
_DIGEST = 32
DRIVER_HEADER = struct.Struct("<IIII16s")
"""VkPipelineCacheHeaderVersionOne: headerSize, headerVersion, vendorID, deviceID, pipelineCacheUUID."""
MAX_BYTES = 256 << 20
"""The largest cache file read (or written): far above what vkx's pipelines take on any driver, so
that only a file that is no cache of vkx's is left unread."""


@dataclass(frozen=True)
class Identity:
    """What a driver's cache data must match to be used on a device."""
    vendor_id: int
    device_id: int
    uuid: bytes

    @classmethod
    def of(cls, physical) -> "Identity":
        p = vk.vkGetPhysicalDeviceProperties(physical)
        return cls(int(p.vendorID), int(p.deviceID), bytes(p.pipelineCacheUUID))

    def file_name(self) -> str:
        return f"{self.vendor_id:04x}-{self.device_id:04x}-{self.uuid.hex()}.bin"


def cache_root() -> Path:
    """vkx's folder in the user's cache folder."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "vkx"


def cache_path(identity: Identity) -> Path:
    return cache_root() / "pipelines" / identity.file_name()


def pipeline_key(spirv: bytes, nbindings: int, push_bytes: int, spec: tuple[int, ...] = ()) -> bytes:
    """What names one pipeline: its code, its layout and its specialization constants."""
    fields = struct.pack(f"<II{len(spec)}i", nbindings, push_bytes, *spec)
    return hashlib.sha256(spirv + fields).digest()[:KEY_BYTES]


def pack(keys: frozenset[bytes], data: bytes) -> bytes:
    rest = b"".join([_COUNT.pack(len(keys)), *sorted(keys), _COUNT.pack(len(data)), data])
    return MAGIC + hashlib.sha256(rest).digest() + rest


def unpack(blob: bytes, identity: Identity) -> tuple[frozenset[bytes], bytes] | None:
    """(keys, driver data) of a cache file's bytes, or None unless every check passes."""
    start = len(MAGIC) + _DIGEST
    rest = blob[start:]
    if not blob.startswith(MAGIC) or hashlib.sha256(rest).digest() != blob[len(MAGIC):start] \
            or len(rest) < _COUNT.size:
        return None
    (count,) = _COUNT.unpack_from(rest)
    keys_end = _COUNT.size + count * KEY_BYTES
    if len(rest) < keys_end + _COUNT.size:
        return None
    keys = frozenset(rest[_COUNT.size + i * KEY_BYTES: _COUNT.size + (i + 1) * KEY_BYTES] for i in range(count))
    (length,) = _COUNT.unpack_from(rest, keys_end)
    data = rest[keys_end + _COUNT.size:]
    if len(data) != length or len(data) < DRIVER_HEADER.size:
        return None
    size, version, vendor, device, uuid = DRIVER_HEADER.unpack_from(data)
    if (size < DRIVER_HEADER.size or size > len(data) or version != vk.VK_PIPELINE_CACHE_HEADER_VERSION_ONE
            or (vendor, device, uuid) != (identity.vendor_id, identity.device_id, identity.uuid)):
        return None
    return keys, data


def read(identity: Identity) -> tuple[frozenset[bytes], bytes] | None:
    """The usable cache of this device and driver, or None."""
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; O_NOFOLLOW: vkx writes no symlink
        fd = os.open(cache_path(identity), os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_BYTES:
            return None
        blob = os.read(fd, st.st_size + 1)  # one more byte shows a file that grew since the fstat
    except OSError:
        return None
    finally:
        os.close(fd)
    return unpack(blob, identity) if len(blob) == st.st_size else None


def held(identity: Identity, data: bytes) -> str:
    """What the driver's cache data holds, for people: its size, and where it is kept, or that the
    driver keeps no pipeline (its data is its header alone: lavapipe's)."""
    if len(data) <= DRIVER_HEADER.size:
        return f"the driver keeps none: its cache data is {len(data)} B"
    return f"kept by the driver: {len(data):,} B in {cache_path(identity)}"


def write(identity: Identity, keys: frozenset[bytes], data: bytes) -> None:
    """Replace the device's cache file atomically; a folder that cannot be written is left alone."""
    path, blob = cache_path(identity), pack(keys, data)
    if len(blob) > MAX_BYTES:  # it would never be read
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass
