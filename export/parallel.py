"""Passes over a model's weights (casts, quantization): one tensor a worker, each of torch's kernels on
one thread.

torch splits a kernel over its intra-op threads, and each kernel waits for the slowest of them: on a
2-core machine that other work keeps busy, a cast of a 1536 × 512 fp32 weight to fp16 took 13.6 ms
on two threads and 0.15 ms on one (int4 quantization 175 ms and 9.5 ms), which made a 16-bit or
quantized export several times slower than an fp32 one. Workers that each run whole kernels on one
thread keep every core busy without that wait; torch releases the GIL inside its kernels.
"""
from __future__ import annotations

import contextlib
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, Iterator, TypeVar

import torch

T = TypeVar("T")
R = TypeVar("R")


@contextlib.contextmanager
def single_threaded_kernels() -> Iterator[None]:
    """torch's kernels run on one thread each while inside (threads started inside take it too)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def each(fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """`[fn(item) for item in items]`, on a worker a CPU; the first exception `fn` raises, in item order."""
    items = list(items)
    if len(items) < 2:
        with single_threaded_kernels():
            return [fn(item) for item in items]
    with single_threaded_kernels(), ThreadPoolExecutor(max_workers=min(len(items), os.cpu_count() or 1),
                                                       thread_name_prefix="vkx-weights") as pool:
        return list(pool.map(fn, items))
