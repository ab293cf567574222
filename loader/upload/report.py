"""`program.memory`: what a load used, per phase, as numbers and as the table `vkx run --trace-memory` prints.

A `MemoryReport` is the JSON form (a dict: docs/memory.md lists its keys) with typed
attributes on top: `W`, `A`, `peak`, `phases` by name, and `str()` gives the tables.
"""
from __future__ import annotations

import textwrap

from vkx.format.describe import LAZY_PEAK, lazy_peak
from vkx.loader.gpu.memory import MiB
from vkx.loader.upload.trace import Phase

DEVICE_KINDS = ("weights", "imported", "state", "activations", "staging", "io")
"""The device columns, in load order (loader/gpu/memory.py's kinds)."""
FOOTNOTE = textwrap.fill(
    "device memory in MiB as allocated: buffers under 4 MiB share blocks (the weights' sized to the load's "
    "small weights, up to 64 MiB; others 4 MiB, doubling), so a small model shows whole blocks; imported: "
    "file pages the device uses in place (upload=import), no device memory allocated for them", width=80)
"""Under the device table, in lines of 80 columns (the tables are narrower: a pipe or a log keeps it readable)."""


class MemoryReport(dict):
    """The load's memory (docs/memory.md): the JSON form as a dict, typed attributes, `str()` the tables."""

    @property
    def W(self) -> int:
        """Weight bytes on the device (each stored tensor once; imported ones included)."""
        return self["weight_bytes"]

    @property
    def A(self) -> int:
        """Activation bytes allocated at their peak (shared memory objects, temps)."""
        return self["ledger"]["peak"].get("activations", 0)

    @property
    def peak(self) -> int:
        """The device's peak of allocated bytes, all kinds together (imported pages included)."""
        return self["ledger"]["peak_total"]

    @property
    def lazy_peak(self) -> int | None:
        """`lazy_peak` over this load's bytes allocated per kind (the weights as allocated: small ones
        share blocks), which `peak` never exceeds; None for an eager load and for a plan's delegates
        (they load one after another)."""
        if self["schedule"] != "lazy" or "delegates" in self:
            return None
        peak = self["ledger"]["peak"]
        return lazy_peak(peak.get("weights", 0) + peak.get("imported", 0), self.A, peak.get("io", 0),
                         peak.get("state", 0), peak.get("staging", 0))

    @property
    def phases(self) -> dict[str, Phase]:
        """Each phase of the load by name, in order ("before load" ... "after execute")."""
        return {p["name"]: Phase(**p) for p in self["phases"]}

    def __str__(self) -> str:
        phases = list(self.phases.values())
        host = [["phase", "t (s)", "VmRSS", "peak", "RssAnon", "RssFile"]]
        host += [[p.name, f"{p.seconds:.3f}", *(_mib(n) for n in (p.rss, p.peak_rss, p.rss_anon, p.rss_file))]
                 for p in phases]
        device = [["phase", *DEVICE_KINDS]] + [[p.name, *(_mib(p.device.get(k, 0)) for k in DEVICE_KINDS)]
                                               for p in phases]
        bound = self.lazy_peak
        return "\n".join([f"{self['device']}: schedule={self['schedule']} upload={self['upload']}",
                          "Host memory by phase (MiB; peak = VmHWM since the previous phase)", _table(host),
                          "Device memory by phase (MiB allocated)", _table(device), FOOTNOTE,
                          f"W {self.W:,} B (copied {self['copies_per_weight_byte']:.1f}x per byte), "
                          f"activations allocated {self.A:,} B, device peak {self.peak:,} B"
                          + (f" (lazy bound {LAZY_PEAK}: {bound:,} B)" if bound is not None else "")])


def _mib(n: int) -> str:
    return f"{n / MiB:,.1f}"


def _table(rows: list[list[str]]) -> str:
    """Plain columns: the first left-aligned, the numbers right-aligned."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in
                               enumerate(zip(row, widths))).rstrip() for row in rows)
