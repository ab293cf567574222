"""One Program called from several threads (in a subprocess, so that a hang is a timeout)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import relu_add_graph, weights, write_pte

pytestmark = pytest.mark.vulkan  # the device is opened in child processes too

ROOT = Path(__file__).resolve().parents[2]
N = 4096

CHILD = r"""
import json, sys, threading
import numpy as np
import torch
from tests.loader import conftest  # noqa: F401  (registers the test ops)
from tests.loader.helpers import weights
from vkx.loader import load
from vkx.loader.errors import LoadError

path, n, threads, calls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
w = torch.from_numpy(weights(n))
wrong, errors, done = [], [], []

def worker(program, k, until_closed):
    rng = np.random.default_rng(k)
    i = 0
    while until_closed or i < calls:
        x = torch.from_numpy(rng.standard_normal(n).astype(np.float32))
        try:
            out = program(x)
        except LoadError as e:
            if until_closed and "closed" in str(e):
                return
            errors.append(repr(e))
            return
        except Exception as e:
            errors.append(repr(e))
            return
        if not torch.equal(out, torch.relu(x) + w):
            wrong.append((k, i))
        done.append(1)
        i += 1

def run(programs, until_closed=False):
    ts = [threading.Thread(target=worker, args=(programs[k % len(programs)], k, until_closed))
          for k in range(threads)]
    for t in ts:
        t.start()
    if until_closed:
        while len(done) < 2 * threads and not errors:  # close while calls are in flight
            pass
        programs[0].close()
    for t in ts:
        t.join()

calls_done = {}
p = load(path)
run([p])                      # 8 threads, one Program
calls_done["one"] = len(done)
p.close()
p = load(path)
run([p], until_closed=True)   # close() while calls are in flight
closed = p.closed
done.clear()
a, b = load(path), load(path)
run([a, b])                   # two Programs on one device (one queue), from different threads
calls_done["two"] = len(done)
a.close()
b.close()
done.clear()

def own(k):  # a thread that loads, calls and closes programs of its own, beside others doing the same
    try:
        for i in range(3):
            x = torch.from_numpy(np.random.default_rng(k).standard_normal(n).astype(np.float32))
            with load(path) as q:
                if not torch.equal(q(x), torch.relu(x) + w):
                    wrong.append((k, i))
            done.append(1)
    except Exception as e:
        errors.append(repr(e))

ts = [threading.Thread(target=own, args=(k,)) for k in range(4)]
for t in ts:
    t.start()
for t in ts:
    t.join()
calls_done["loads"] = len(done)
print(json.dumps({"calls": calls_done, "wrong": wrong[:5], "n_wrong": len(wrong), "errors": errors[:5],
                  "closed": closed}))
"""


def test_program_is_thread_safe(tmp_path):
    path, _ = write_pte(tmp_path, relu_add_graph(N), [weights(N)])
    env = {**os.environ, "VKX_VALIDATION": "1"}
    proc = subprocess.run([sys.executable, "-c", CHILD, path, str(N), "8", "50"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-4000:]
    r = json.loads(proc.stdout.splitlines()[-1])
    assert r["errors"] == [] and r["n_wrong"] == 0, r
    assert r["calls"] == {"one": 8 * 50, "two": 8 * 50, "loads": 4 * 3}  # loads in 4 threads at once: the
    # validation layer's threading errors before (one command pool of the device's, shared by every load)
    assert r["closed"]
