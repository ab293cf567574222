"""Host copies with the cast, split over a few threads (numpy releases the GIL,
so two threads roughly double first-touch and warm copy rates)."""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

_pool: ThreadPoolExecutor | None = None
THREADS = max(1, min(4, os.cpu_count() or 1))
PARALLEL_MIN = 1 << 20  # elements; below this one thread is faster


def copy_cast(dst: np.ndarray, src: np.ndarray) -> None:
    """dst[:] = src cast to dst's dtype, split over threads when large (numpy releases the GIL)."""
    global _pool
    n = dst.size
    if THREADS == 1 or n < PARALLEL_MIN:
        np.copyto(dst, src, casting="unsafe")
        return
    if _pool is None:
        _pool = ThreadPoolExecutor(THREADS, thread_name_prefix="vkx-copy")
    step = -(-n // THREADS)
    parts = [(lo, min(n, lo + step)) for lo in range(0, n, step)]
    for f in [_pool.submit(np.copyto, dst[a:b], src[a:b], casting="unsafe") for a, b in parts]:
        f.result()
