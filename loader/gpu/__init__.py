"""The Vulkan device: what the rest of the loader runs on.

Modules: device (instance, physical device, logical device, compute queue, validation), limits (the
limits and features in force, a device profile's where lower, and the one check of every pipeline
against them), _profiles_regen (the profiles' figures read from Khronos' published files into
profiles.json), memory (allocator + ledger of live and peak bytes), shaders (SPIR-V by variant, compute
pipelines), spirv (the prebuilt SPIR-V archive, built with the package), pipeline_cache (the driver's
compiled pipelines kept on disk).
"""
