"""Run ExecuTorch 1.5.1's Vulkan op cases (tests/data/et_op_cases.py) both ways on vkx and write the
table of outcomes per op to docs/executorch-ops.md.

    VKX_VALIDATION=1 .venv/bin/python -m bench.et_op_cases

Path "vkx": the one-op module through vkx.export_model; path "et": ExecuTorch's own Vulkan export of
it (tests/data/et_op_cases/, tests/data/make_et_op_cases.py). Each run is judged against torch eager
(tests/ops/et_op_run.py).
"""
from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

from tests.ops.et_op_run import ABSENT, PASS, PATHS, REFUSED, WRONG, judge, runs

ROOT = Path(__file__).resolve().parents[1]

DOC = ROOT / "docs" / "executorch-ops.md"
OUTCOMES = (PASS, REFUSED, WRONG, ABSENT)


def main() -> None:
    table: dict[str, dict[str, Counter]] = defaultdict(lambda: {p: Counter() for p in PATHS})
    notes: list[str] = []
    for run_id, (case, dtype) in runs().items():
        for path in PATHS:
            outcome, detail = judge(path, case, dtype)
            table[case.op][path][outcome] += 1
            if outcome in (REFUSED, WRONG):
                detail = detail.replace(f"{ROOT}/", "").replace("|", "/")
                notes.append(f"| {run_id} | {path} | {outcome} | {detail} |")
            print(f"{run_id:40} {path:4} {outcome} {detail}", flush=True)
    totals = {p: sum((row[p] for row in table.values()), Counter()) for p in PATHS}
    lines = [
        "# ExecuTorch's Vulkan op cases on vkx",
        "",
        "ExecuTorch 1.5.1's Vulkan operator suite (`backends/vulkan/test/op_tests/cases.py`), as a pinned compact",
        "case list written for vkx (`tests/data/et_op_cases.py`: each op the suite tests, a few of its shapes and",
        "arguments, made small, in fp32 and fp16 where the suite runs fp16). Each case is a one-op module run on",
        "vkx two ways and compared with torch eager: **vkx**, exported by `vkx.export_model`; **et**, exported by",
        "ExecuTorch's own Vulkan partitioner (`tests/data/et_op_cases/`, `make_et_op_cases.py`; *not made*: ExecuTorch",
        "refused to export it; a file of ExecuTorch's with no Vulkan delegate, the op left on the CPU, runs that",
        "CPU op as vkx runs any ExecuTorch plan: `vkx.loader.execute.plan`). `tests/ops/test_et_op_cases.py` pins every",
        "outcome; this table is written by `bench/et_op_cases.py`.",
        "",
        "| path | runs | " + " | ".join(OUTCOMES) + " |",
        "|---|---|" + "---|" * len(OUTCOMES),
    ]
    for p in PATHS:
        lines.append(f"| {p} | {sum(totals[p].values())} | " + " | ".join(str(totals[p][o]) for o in OUTCOMES) + " |")
    lines += ["", "| op | runs | vkx: pass / refused / wrong | et: pass / refused / wrong / not made |", "|---|---|---|---|"]
    for op in sorted(table):
        row = table[op]
        vk, et = row["vkx"], row["et"]
        lines.append(f"| `{op}` | {sum(vk.values())} | {vk[PASS]} / {vk[REFUSED]} / {vk[WRONG]} | "
                     f"{et[PASS]} / {et[REFUSED]} / {et[WRONG]} / {et[ABSENT]} |")
    if notes:
        lines += ["", "Runs that do not pass:", "", "| run | path | outcome | why |", "|---|---|---|---|", *notes, ""]
    else:
        lines += ["", "Every run passes, on both paths (a case ExecuTorch did not make has no et run).", ""]
    _, heading, sections = DOC.read_text().partition("\n## ")  # the sections written by hand after the table stay
    DOC.write_text("\n".join(lines) + heading + sections)
    print({p: dict(totals[p]) for p in PATHS})


if __name__ == "__main__":
    main()
