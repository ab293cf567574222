"""The load: a file's graphs and weights onto the device, in named stages, with the least memory.

Modules: files (`load(path)`: a .pte and its external data opened, a `Program` returned), loading
(`load_methods`, the one driver of the stages over a file's methods; `load_graph`), stages (the load
stages: build, weights, activations, record, in the lazy or eager order), options (their choices, free
of torch and Vulkan: the CLI reads them), named_data (constants' bytes as freeable buffers), copy (host
copies on a few threads), staging (the upload ring), prepack (constants' upload), trace (the memory
timeline), report (what a load used, as `program.memory`, and the lazy peak's one formula).
"""
