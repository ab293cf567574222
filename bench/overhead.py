"""Per-call overhead: where the microseconds of `program(x)` go, for a tiny model.

The model is one Linear(16, 16) at batch 1, so its GPU work is next to nothing and a
call's time is its fixed cost. Each phase of a call is timed on its own, in the order
a call runs them (loader/execute/method.py, loader/execute/ports.py, loader/execute/record.py), and the whole
call with numpy and with torch inputs. The baseline, measured in the same run on the
same device and queue, is a bare vkQueueSubmit + vkWaitForFences + vkResetFences of an
empty command buffer: what any Vulkan program pays per submission. The polled baseline
busy-waits on the fence instead (vkGetFenceStatus), as a call does on a GPU (loader/execute/record.py:
it polls up to 2 ms, then blocks; on a CPU device it blocks at once, since a spinning caller
takes a core from the driver's own threads). "vkx's part" is the whole call less the
baseline it waits like; "host work" is the same call with the replay taken out (what vkx's
Python costs per call, free of the wait's wake-up jitter).

Every row is the median over `--calls` timed repetitions, taken in `--rounds` rounds
that interleave the phases (so load from other processes spreads over all of them).

    .venv/bin/python bench/overhead.py [--calls 2000] [--rounds 5] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import vulkan as vk
from torch import nn

import vkx
from vkx.loader.gpu.device import UINT64_MAX, CommandPool

ffi = vk.ffi
lib = vk._vulkan.lib


class EmptySubmit:
    """An empty command buffer and a fence on the program's device: the baseline submission."""

    def __init__(self, device):
        self.device = device
        self.commands = CommandPool(device)
        self.cmd = self.commands.buffer()
        vk.vkBeginCommandBuffer(self.cmd, vk.VkCommandBufferBeginInfo())
        vk.vkEndCommandBuffer(self.cmd)
        self.fence = vk.vkCreateFence(device.device, vk.VkFenceCreateInfo(), None)
        self.fences = ffi.new("VkFence[1]", [self.fence])
        self.cmds = ffi.new("VkCommandBuffer[1]", [self.cmd])
        self.submit = ffi.new("VkSubmitInfo*")
        self.submit.sType = vk.VK_STRUCTURE_TYPE_SUBMIT_INFO
        self.submit.commandBufferCount = 1
        self.submit.pCommandBuffers = self.cmds

    def __call__(self) -> None:
        d = self.device
        lib.vkQueueSubmit(d.queue, 1, self.submit, self.fence)
        lib.vkWaitForFences(d.device, 1, self.fences, vk.VK_TRUE, UINT64_MAX)
        lib.vkResetFences(d.device, 1, self.fences)

    def polled(self) -> None:
        """The same, polling vkGetFenceStatus instead of blocking in vkWaitForFences."""
        d = self.device
        lib.vkQueueSubmit(d.queue, 1, self.submit, self.fence)
        while lib.vkGetFenceStatus(d.device, self.fence) != vk.VK_SUCCESS:
            pass
        lib.vkResetFences(d.device, 1, self.fences)

    def close(self) -> None:
        vk.vkDestroyFence(self.device.device, self.fence, None)
        self.commands.close()


def replay_split(executor) -> tuple[float, float, float]:
    """One replay of the recorded command buffer, timed in its three Vulkan calls."""
    d = executor.device
    t0 = time.perf_counter()
    lib.vkQueueSubmit(d.queue, 1, executor._submit, executor.fence)
    t1 = time.perf_counter()
    lib.vkWaitForFences(d.device, 1, executor._fences, vk.VK_TRUE, UINT64_MAX)
    t2 = time.perf_counter()
    lib.vkResetFences(d.device, 1, executor._fences)
    return t1 - t0, t2 - t1, time.perf_counter() - t2


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure(calls: int, rounds: int) -> dict:
    torch.manual_seed(0)
    model = nn.Linear(16, 16).eval()
    xt = torch.randn(1, 16)
    xn = xt.numpy().copy()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "linear16.pte"
        vkx.export_model(model, (xt,), path)
        program = vkx.load(path)
    empty = EmptySubmit(program.device)
    method = program.only
    executor, port_in, port_out = method._executor, method._in[0], method._out[0]
    out = program(xn)
    with torch.no_grad():
        assert np.allclose(out, model(xt).numpy(), rtol=1e-4, atol=1e-5), "vkx's output differs from torch's"

    phases = {
        "baseline: empty submit + wait + reset": empty,
        "the same, fence polled (vkGetFenceStatus)": empty.polled,
        "arguments and checks, numpy": lambda: method._inputs(method._arguments((xn,), {})),
        "arguments and checks, torch": lambda: method._inputs(method._arguments((xt,), {})),
        "input write (one np.copyto)": lambda: port_in.write(xn, False),
        "output read (one copy)": lambda: port_out.read(False),
        "torch.from_numpy of the output": lambda: torch.from_numpy(out),
        "whole call, numpy": lambda: program(xn),
        "whole call, torch": lambda: program(xt),
    }
    samples: dict[str, list[float]] = {name: [] for name in phases}
    split: list[tuple[float, float, float]] = []
    per_round = max(1, calls // rounds)
    for fn in phases.values():  # warm-up
        for _ in range(50):
            fn()
    for _ in range(rounds):
        for name, fn in phases.items():
            samples[name] += [timed(fn) for _ in range(per_round)]
        split += [replay_split(executor) for _ in range(per_round)]
    # the host work alone: the same calls with the replay (submit, wait, reset) taken out
    replay, executor.run = executor.run, lambda: None
    for _ in range(rounds):
        for name, x in (("host work of a call, numpy (no replay)", xn), ("host work of a call, torch (no replay)", xt)):
            samples.setdefault(name, []).extend(timed(lambda: program(x)) for _ in range(per_round))
    executor.run = replay
    cpu = program.device.is_cpu
    empty.close()
    program.close()
    us = {name: statistics.median(s) * 1e6 for name, s in samples.items()}
    for i, name in enumerate(("vkQueueSubmit", "vkWaitForFences", "vkResetFences")):
        us[name] = statistics.median(x[i] for x in split) * 1e6
    # the empty command buffer waited for as a call waits (loader/execute/record.py): polled on a GPU, blocking on a CPU device
    vulkan = us["baseline: empty submit + wait + reset" if cpu else "the same, fence polled (vkGetFenceStatus)"]
    us["vkx's part, numpy (whole call - the empty submit and wait)"] = us["whole call, numpy"] - vulkan
    us["vkx's part, torch"] = us["whole call, torch"] - vulkan
    return {"device": program.device.name, "calls": per_round * rounds, "us": us}


ORDER = ("baseline: empty submit + wait + reset", "the same, fence polled (vkGetFenceStatus)", "arguments and checks, numpy", "arguments and checks, torch",
         "input write (one np.copyto)", "vkQueueSubmit", "vkWaitForFences", "vkResetFences",
         "output read (one copy)", "torch.from_numpy of the output", "whole call, numpy", "whole call, torch",
         "vkx's part, numpy (whole call - the empty submit and wait)", "vkx's part, torch",
         "host work of a call, numpy (no replay)", "host work of a call, torch (no replay)")


def table(result: dict) -> None:
    us = result["us"]
    base = us[ORDER[0]]
    print(f"Per-call overhead, Linear(16, 16) batch 1, {result['device']} "
          f"(median of {result['calls']} calls per row)")
    print(f"{'phase':56} {'µs':>8} {'/ baseline':>11}")
    for name in ORDER:
        print(f"{name:56} {us[name]:8.1f} {us[name] / base:11.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="timed repetitions per phase")
    parser.add_argument("--rounds", type=int, default=5, help="rounds the repetitions are split into")
    parser.add_argument("--json", type=Path, help="also write the numbers as JSON here")
    args = parser.parse_args()
    result = measure(args.calls, args.rounds)
    table(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
