"""Host copies split over a few threads (numpy and pread release the GIL, so two
threads roughly double first-touch and warm copy rates)."""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numpy as np

_pool: ThreadPoolExecutor | None = None
THREADS = max(1, min(4, os.cpu_count() or 1))
PARALLEL_MIN = 1 << 20  # elements; below this one thread is faster


def parallel(copy: Callable[[int, int], None], n: int) -> None:
    """copy(lo, hi) over [0, n), split over threads when n is large; exceptions propagate."""
    global _pool
    if THREADS == 1 or n < PARALLEL_MIN:
        copy(0, n)
        return
    if _pool is None:
        _pool = ThreadPoolExecutor(THREADS, thread_name_prefix="vkx-copy")
    step = -(-n // THREADS)
    futures = [_pool.submit(copy, lo, min(n, lo + step)) for lo in range(0, n, step)]
    # every part ends before the first error is raised: the caller may free the destination then
    errors = [f.exception() for f in futures]
    for error in errors:
        if error is not None:
            raise error


def copy_cast(dst: np.ndarray, src: np.ndarray) -> None:
    """dst[:] = src cast to dst's dtype, split over threads when large."""
    parallel(lambda a, b: np.copyto(dst[a:b], src[a:b], casting="unsafe"), dst.size)
