"""The load's option choices, in a module that imports neither torch nor Vulkan: the loader checks
them (vkx.loader.upload.stages.Options), the CLI offers them (`vkx run --schedule/--upload`)."""

SCHEDULES = ("lazy", "eager")
"""lazy: weights allocated as uploaded, activations last (W + A); eager: the old order (2W + A + w)."""
UPLOADS = ("auto", "staging", "direct", "import")
"""How weight bytes reach the device: auto writes them directly where device memory is host memory or
host-cached, else through the staging ring; import uses the files' pages in place or refuses
(vkx.loader.upload.prepack.upload_mode)."""
