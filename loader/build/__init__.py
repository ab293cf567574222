"""Graph building: a VkGraph's op calls bound to their builders (vkx.loader.ops), fused where one
kernel does a chain, and turned into tensors without memory and a dispatch list.

Modules: graph (tensors, the dispatch list, the builder that binds each call), fuse (chains of ops one
kernel does, replaced at load), fuse_rotary (its rotary-and-cache-write pattern), chain (what the
patterns read of a graph's op chain: who writes and who reads each value).
"""
