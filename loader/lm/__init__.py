"""Causal language models over loaded programs: token generation, its device recordings, perplexity.

Nothing on the load path imports this package (`vkx.load` never does; `Program.generate` imports it
on first use); it extends loaded methods only through the loader's one way, a method's `Tail`.

Modules: generate (the generation loop: prompt chunks, sampling, greedy bursts, timings; the sizes an
LM file was exported with), decoders (the decoders over vkx's prefill/decode programs and over
ExecuTorch's LLM programs; `generate_program`, what `Program.generate` and `vkx generate` run), greedy
(what decoding records on the device: a method's argmax, decode steps chained there, greedy or sampled),
perplexity (a text's perplexity from a program's score method).
"""
