"""Regenerate `loader/gpu/profiles.json`, vkx's device profiles, from Khronos' published profile files.

Run `python -m vkx.loader.gpu._profiles_regen DIR` (`make profiles` passes the Makefile's KHRONOS_PROFILES;
without DIR, `$VKX_KHRONOS_PROFILES`). DIR holds Khronos Vulkan-Profiles' `profiles/VP_*.json`. Each
profile's figures are read from its file, never typed here: the limits vkx's kernels depend on, the
API version, and the features of `vkx.loader.gpu.limits.FEATURES`, each profile on top of the profiles it
requires (a later figure replaces an earlier one: each is a minimum the device guarantees).
`tests/loader/test_limits.py` checks the committed file against DIR's where DIR is at hand.
The files and their revisions: docs/profiles.md, "The profiles and where each figure comes from".
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent / "profiles.json"
FOLDER_VARIABLE = "VKX_KHRONOS_PROFILES"
"""The environment variable naming the folder of Khronos' profile files (and its profiles layer)."""

PROFILES = {"android-baseline-2022": "VP_ANDROID_baseline_2022", "android-15": "VP_ANDROID_15_minimums",
            "android-16": "VP_ANDROID_16_minimums"}
"""vkx's name for each Khronos profile it models; the file is `<profile>.json`."""

LIMITS = ("maxStorageBufferRange", "minStorageBufferOffsetAlignment", "maxPushConstantsSize",
          "maxComputeSharedMemorySize", "maxComputeWorkGroupInvocations", "maxComputeWorkGroupSize",
          "maxComputeWorkGroupCount", "maxPerStageDescriptorStorageBuffers", "maxBoundDescriptorSets")
"""The VkPhysicalDeviceLimits that vkx.loader.gpu.limits.Limits holds."""

FEATURE_STRUCTS = {
    "storageBuffer16BitAccess": ("VkPhysicalDevice16BitStorageFeatures", "VkPhysicalDeviceVulkan11Features"),
    "storageBuffer8BitAccess": ("VkPhysicalDevice8BitStorageFeatures", "VkPhysicalDeviceVulkan12Features"),
    "shaderFloat16": ("VkPhysicalDeviceShaderFloat16Int8Features", "VkPhysicalDeviceVulkan12Features"),
    "shaderInt8": ("VkPhysicalDeviceShaderFloat16Int8Features", "VkPhysicalDeviceVulkan12Features"),
    "shaderInt16": ("VkPhysicalDeviceFeatures",),
    "shaderInt64": ("VkPhysicalDeviceFeatures",),
    "shaderIntegerDotProduct": ("VkPhysicalDeviceShaderIntegerDotProductFeatures", "VkPhysicalDeviceVulkan13Features"),
    "vulkanMemoryModel": ("VkPhysicalDeviceVulkanMemoryModelFeatures", "VkPhysicalDeviceVulkan12Features"),
}
"""Where a profile file states each feature (a profile may name the core-version struct or the extension's)."""
SUBGROUP_OPERATIONS = {"VK_SUBGROUP_FEATURE_BASIC_BIT", "VK_SUBGROUP_FEATURE_ARITHMETIC_BIT"}
"""vkx's `subgroupOperations`: these in the compute stage, which Vulkan 1.1 requires of every device
with a compute queue, so the operations alone decide."""


def _merged(directory: Path, name: str) -> tuple[dict, list[dict]]:
    """The profile `name`'s own entry and its capabilities after those of the profiles it requires."""
    document = json.loads((directory / f"{name}.json").read_text())
    entry = document["profiles"][name]
    chain: list[dict] = []
    for required in entry.get("profiles", []):
        chain += _merged(directory, required)[1]
    for cap in entry["capabilities"]:
        if isinstance(cap, str):  # a list is a choice of alternatives: not guaranteed, so not counted
            chain.append(document["capabilities"][cap])
    return entry, chain


def extract(directory: Path, name: str) -> dict:
    """vkx's record of the profile `name` (a Khronos profile name) from its file in `directory`."""
    entry, chain = _merged(directory, name)
    limits: dict = {}
    features: dict[str, bool] = {}
    subgroup_size, operations = 0, set()
    for cap in chain:
        props = cap.get("properties", {})
        limits.update({k: v for k, v in props.get("VkPhysicalDeviceProperties", {}).get("limits", {}).items()
                       if k in LIMITS})
        for struct in ("VkPhysicalDeviceSubgroupProperties", "VkPhysicalDeviceVulkan11Properties"):
            sub = props.get(struct, {})
            subgroup_size = sub.get("subgroupSize", subgroup_size)
            operations |= set(sub.get("supportedOperations", sub.get("subgroupSupportedOperations", ())))
        for feature, structs in FEATURE_STRUCTS.items():
            for struct in structs:
                value = cap.get("features", {}).get(struct, {}).get(feature)
                if value is not None:
                    features[feature] = bool(value)
    missing = [k for k in LIMITS if k not in limits]
    if missing:
        raise ValueError(f"{name}: the profile states no {', '.join(missing)}")
    on = sorted(f for f, v in features.items() if v)
    if SUBGROUP_OPERATIONS <= operations:
        on = sorted([*on, "subgroupOperations"])
    latest = max(entry["history"], key=lambda h: h["revision"])  # files list it first or last
    return {"profile": name, "file": f"{name}.json", "revision": latest["revision"], "date": latest["date"],
            "api_version": entry["api-version"],
            "limits": {k: limits[k] for k in LIMITS}, "subgroup_size": subgroup_size, "features": on}


def regenerate(directory: Path) -> str:
    """The text of profiles.json from the Khronos files in `directory`."""
    records = {vkx_name: extract(directory, name) for vkx_name, name in PROFILES.items()}
    return json.dumps(records, indent=1) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    named = args[0] if args else os.environ.get(FOLDER_VARIABLE)
    if not named:
        print(f"vkx: error: name the folder of Khronos' profile files (an argument, or {FOLDER_VARIABLE})",
              file=sys.stderr)
        return 2
    directory = Path(named)
    try:
        text = regenerate(directory)
    except (OSError, KeyError, ValueError) as error:
        print(f"vkx: error: cannot read Khronos' profiles in {directory}: {error}", file=sys.stderr)
        return 2
    OUT.write_text(text)
    print(f"{OUT}: {', '.join(PROFILES)} from {directory}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
