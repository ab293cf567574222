"""The memory timeline of a load: host RSS (from /proc/self/status) and device
bytes (from the ledger) at each phase.

Only a traced timeline (`trace=True`, what `load(..., trace_memory=True)` asks
for) touches process-wide counters: it resets VmHWM (writing "5" to
/proc/self/clear_refs) at the start and after every phase, so that each
phase's `peak_rss` is the peak since the previous one. An untraced timeline
only reads; its `peak_rss` is the process's peak so far, since the host
application may rely on VmHWM itself."""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass

KiB = 1024
FIELDS = ("VmRSS", "VmHWM", "RssAnon", "RssFile")


def read_status() -> dict[str, int]:
    """VmRSS, VmHWM, RssAnon, RssFile of this process, in bytes (0 where unknown)."""
    out = dict.fromkeys(FIELDS, 0)
    try:
        with open("/proc/self/status") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in out:
                    out[key] = int(rest.split()[0]) * KiB
    except OSError:
        pass
    return out


def reset_peak() -> bool:
    """Reset VmHWM to the current RSS; False where the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


@dataclass
class Phase:
    name: str
    seconds: float
    rss: int
    peak_rss: int
    rss_anon: int
    rss_file: int
    device: dict

    def as_dict(self) -> dict:
        return asdict(self)


class Timeline:
    """Memory and time at each named phase of a load; `trace` resets VmHWM between phases."""

    def __init__(self, ledger=None, trace: bool = False):
        self.ledger = ledger
        self.t0 = time.perf_counter()
        self.phases: list[Phase] = []
        self.peak_resets = trace and reset_peak()

    def mark(self, name: str) -> Phase:
        s = read_status()
        device = dict(self.ledger.live) if self.ledger is not None else {}
        device["total"] = sum(device.values())
        phase = Phase(name, time.perf_counter() - self.t0, s["VmRSS"], max(s["VmHWM"], s["VmRSS"]),
                      s["RssAnon"], s["RssFile"], device)
        self.phases.append(phase)
        if self.peak_resets:
            reset_peak()
        return phase

    def as_list(self) -> list[dict]:
        return [p.as_dict() for p in self.phases]
