"""Each class of attack a user or an attacker can bring against vkx's files and commands, tried many
times and counted: the table of docs/safety.md, "What these checks were tried against". (Over 500
lines: one table, whose ten rows each need a small runner and judge of their own kind of case.)

    .venv/bin/python bench/reliability.py [--count N] [--json] [--write]

Every row draws its cases from the tests' own generators (tests/format/test_fmt_mutation.py,
test_fmt_fuzz.py, plan_mutants.py, ...) with fixed seeds, so a run is repeatable. `--count N` scales
every row: a row tries N times its own number of cases (default N = 10, about 3 minutes on the 2-core
VM with lavapipe; N = 1 is the smallest run, tests/format/test_reliability_script.py's).

Each case ends in one of: refused with a typed error (by `vkx validate`, at load, or as one
`vkx: error:` line), ran and gave the right answer (torch's, what the file's own bytes compute, or the
unmutated file's), a wrong answer, or a crash (a traceback, a signal, a hang past a timeout); apart
from that, whether a file the user had was lost or replaced without being asked. A row runs in a
child process: when it dies or hangs, its case is counted as a crash and a new child goes on after it.
One line a row goes to stderr as it finishes, then the markdown table (every case that is not
refused or right, or that left a note, is listed under it) to stdout; `--json` prints one JSON object
instead, and `--write` puts the table into docs/safety.md between its two markers.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import multiprocessing
import os
import random
import re
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the tests' generators: tests.format.plan_mutants, ...

DOC = ROOT / "docs" / "safety.md"
BEGIN = "<!-- reliability table: bench/reliability.py --write -->"
END = "<!-- end of reliability table -->"
DEFAULT_COUNT = 10
SEED = 43  # issue 43
SETUP_SECONDS = 600
CASE_SECONDS = 180
CHILD_SECONDS = 120  # a command a case runs

REFUSED, RIGHT, WRONG, CRASH = "refused", "right", "wrong", "crashes"
HEADER = ("what was tried", "tried", "refused by `vkx validate` or at load, with a typed error",
          "ran and gave torch's or the unmutated file's answer", "wrong answers",
          "crashes (traceback, signal, hang past a timeout)", "user files lost or replaced")


@dataclasses.dataclass
class Outcome:
    """How one case ended: REFUSED, RIGHT, WRONG or CRASH; whether a file of the user's was lost; what
    to report of it."""
    kind: str
    lost: bool = False
    note: str = ""


@dataclasses.dataclass
class Row:
    """One class of attack: its name in the table, and how its cases are made and tried."""
    name: str
    per_count: int
    """Cases per unit of --count."""
    setup: Callable[[Path, int], Any]
    """(scratch folder, number of cases) -> the state every case gets; made again by a new child."""
    case: Callable[[Any, int, Path], Outcome]
    """(state, case index, an empty folder of its own) -> the outcome."""


# -- what the cases share -------------------------------------------------------------------------

X = np.array([[0.5, -1.25, 2.0, 0.75]], np.float32)  # the tiny program's input (tests/format/fmt_tiny.py)


def file_answer(pte: Path, external: list[Path]) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """What a .pte of the tiny program's ops (prepack, linear, relu, add in one delegate) computes from
    its own plan, graph and constant bytes for the input X, in float64: per output, its value and
    scale (the same ops on magnitudes, for the rounding allowed). None for a program of other ops, or
    one that reads a value nothing wrote."""
    from tests.format.plan_mutants import graph_and_constants
    from vkx.format import ProgramFile
    from vkx.format import vkgraph as vk

    graph, constants = graph_and_constants(pte, external)
    with ProgramFile.open(pte) as pf:
        plan = pf.program.execution_plan[0]

    def run(given: np.ndarray, magnitude: bool) -> list[np.ndarray]:
        env = {graph.input_ids[0]: given}

        def value(vid: int):
            v = graph.values[vid]
            if isinstance(v, vk.Null):
                return None
            if isinstance(v, (vk.Int, vk.Double)):
                return abs(v.value) if magnitude else v.value
            if vid not in env:  # a constant
                a = np.frombuffer(constants[v.constant_id], v.dtype.numpy).reshape(v.dims).astype(np.float64)
                env[vid] = np.abs(a) if magnitude else a
            return env[vid]
        for call in graph.chain:
            a = call.args
            if call.name == "et_vk.prepack.default":
                got = value(a[0])
            elif call.name == "aten.linear.default":
                bias = value(a[2])
                got = value(a[0]) @ value(a[1]).T + (0 if bias is None else bias)
            elif call.name == "aten.relu.default":
                got = np.abs(value(a[0])) if magnitude else np.maximum(value(a[0]), 0)
            elif call.name == "aten.add.Tensor":
                got = value(a[0]) + value(a[2]) * value(a[1])
            else:
                raise LookupError(call.name)
            kind = np.dtype(graph.values[a[-1]].dtype.numpy).kind  # each op's result in its output's dtype
            env[a[-1]] = (got != 0).astype(np.float64) if kind == "b" else np.trunc(got) if kind in "iu" else got
        return [env[o] for o in graph.output_ids]

    out = []
    try:
        for magnitude in (False, True):
            values = {plan.inputs[0]: np.abs(X) if magnitude else X.astype(np.float64)}
            for ins in plan.chains[0].instructions:
                if ins.kind != "DelegateCall" or len(ins.args) != 2:
                    return None
                with np.errstate(all="ignore"):
                    values[ins.args[1]] = run(values[ins.args[0]], magnitude)[0]
            out.append([values[o] for o in plan.outputs])
    except (LookupError, ValueError, TypeError, IndexError):
        return None
    return list(zip(*out))


def close_to(got: np.ndarray, answer: tuple[np.ndarray, np.ndarray]) -> bool:
    """fp32 output vs the float64 answer, within 1e-5 of each element's scale; elements whose scale
    overflows fp32 (their fp32 value depends on the order of the sums) are not compared."""
    want, scale = answer
    if got.shape != want.shape:
        return False
    with np.errstate(all="ignore"):
        compared = np.isfinite(scale) & (scale < 1e36)
        return bool(np.all(np.abs(got.astype(np.float64) - want)[compared] <= 1e-5 * scale[compared] + 1e-30))


def same(got, want) -> bool:
    """Equal outputs, bit for bit (NaN equal to NaN)."""
    try:
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    except (AssertionError, ValueError):
        return False
    return True


def snapshot(folder: Path) -> dict[str, tuple]:
    """Each entry under `folder` as it is: a file's digest, a link's target, a FIFO, a folder."""
    out: dict[str, tuple] = {}
    for here, dirs, files in os.walk(folder):
        for name in [*dirs, *files]:
            path = Path(here) / name
            mode = os.lstat(path).st_mode
            key = str(path.relative_to(folder))
            if stat.S_ISLNK(mode):
                out[key] = ("link", os.readlink(path))
            elif stat.S_ISREG(mode):
                out[key] = ("file", hashlib.sha256(path.read_bytes()).hexdigest())
            else:
                out[key] = ("fifo" if stat.S_ISFIFO(mode) else "folder",)
    return out


def lost_if_changed(outcome: Outcome, before: dict, after: dict, allowed: set[str] = frozenset()) -> Outcome:
    """`outcome`, lost where an entry of the `before` snapshot is gone or other `after` (the names
    `allowed` were to be replaced: the user asked)."""
    gone = sorted(k for k, v in before.items() if k not in allowed and after.get(k) != v)
    if gone:
        outcome.lost = True
        outcome.note = f"{outcome.note}; changed: {', '.join(gone)}".lstrip("; ")
    return outcome


def leftovers(folder: Path) -> list[str]:
    """Temp files of a write left in `folder` (`.NAME.<hex>.tmp` / `.old`, format/atomic.py)."""
    return sorted(p.name for p in folder.iterdir() if re.fullmatch(r"\..+\.[0-9a-f]{8}\.(tmp|old)", p.name))


def run_tiny(pte: Path, external: list[Path], answer, unmutated) -> Outcome:
    """Load and run a tiny program: refused (typed), or its outputs judged against `answer` (what its
    bytes compute: file_answer) or, with none, against the unmutated program's outputs."""
    import vkx
    from vkx.format.errors import VkxError
    try:
        with vkx.load(pte, external) as program:
            got = program.run_numpy(X)
    except VkxError:
        return Outcome(REFUSED)
    gave = f"ran and gave {[o.tolist() for o in got]}"
    if answer is not None:
        right = len(got) == len(answer) and all(close_to(g, a) for g, a in zip(got, answer))
        return Outcome(RIGHT) if right else Outcome(WRONG, note=f"{gave}; its bytes compute "
                                                                f"{[a.tolist() for a, _ in answer]}")
    return Outcome(RIGHT) if same(got, unmutated) else Outcome(WRONG, note=f"{gave}; the unmutated program gives "
                                                                            f"{[o.tolist() for o in unmutated]}")


def sample(rng: random.Random, items: list, n: int) -> list:
    """n of `items`, without repeats while there are enough."""
    return rng.sample(items, n) if n <= len(items) else [rng.choice(items) for _ in range(n)]


# -- bytes of the tests' files ------------------------------------------------------------------------

GOLDEN_TARGETS = [("tiny_named.pte", None), ("tiny_ext.pte", "tiny_ext.ptd"), ("tiny_st.pte", "tiny_st.safetensors")]
"""(.pte, external file): the file mutated is the external one where there is one (test_fmt_mutation)."""


def bytes_setup(scratch: Path, n: int):
    from hypothesis import HealthCheck, Phase, given, settings

    import vkx
    from tests.format.conftest import GOLDEN
    from tests.format.test_fmt_fuzz import PTE, mutated
    from tests.format.test_fmt_mutation import _mutations

    rng = random.Random(SEED)
    swept = [(t, label, data) for t, (pte, ext) in enumerate(GOLDEN_TARGETS)
             for label, data in _mutations((GOLDEN / (ext or pte)).read_bytes()) if data]
    fuzzed: list[bytes] = []

    @settings(max_examples=n // 3, database=None, derandomize=True, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(mutated(PTE))
    def draw(buf: bytes) -> None:
        fuzzed.append(buf)
    if n // 3:
        draw()
    cases = sample(rng, swept, n - len(fuzzed)) + [(0, f"fuzzed {i} (1 to 8 edits)", b) for i, b in enumerate(fuzzed)]
    with vkx.load(GOLDEN / "tiny_named.pte") as program:
        unmutated = program.run_numpy(X)
    return GOLDEN, cases, unmutated


def bytes_case(state, i: int, folder: Path) -> Outcome:
    from vkx.format import FormatError, describe, validate

    golden, cases, unmutated = state
    target, label, data = cases[i]
    pte_name, ext_name = GOLDEN_TARGETS[target]
    pte = folder / pte_name
    shutil.copyfile(golden / pte_name, pte)
    external = [folder / ext_name] if ext_name else []
    (folder / (ext_name or pte_name)).write_bytes(data)
    before = snapshot(folder)
    try:
        validate(pte, external)
        describe(pte, external)
        outcome = run_tiny(pte, external, file_answer(pte, external), unmutated)
    except FormatError:
        outcome = Outcome(REFUSED)
    if outcome.note:
        outcome.note = f"{ext_name or pte_name}, {label}: {outcome.note}"
    return lost_if_changed(outcome, before, snapshot(folder))


# -- memory plans -------------------------------------------------------------------------------------

PLAN_FILES = ["et_cnn", "et_mlp", "et_q8_lm", "et_vocab_rope", "et_vocab_shape", "et_vocab_vit"]
PLAN_EXAMPLES = ["transformer", "kv_decoder"]


def exported(folder: Path, name: str) -> Path:
    """examples/NAME.py exported to folder/NAME.pte."""
    import vkx
    from vkx.export.model_file import load_model_file
    module, inputs = load_model_file(ROOT / "examples" / f"{name}.py")
    path = folder / f"{name}.pte"
    vkx.export_model(module, inputs, str(path))
    return path


def run_graph(graph, constants, inputs, calls: int = 1) -> list[list[np.ndarray]]:
    from vkx.loader import load_graph
    with load_graph(graph, constants) as program:
        return [[np.array(o) for o in program.run_numpy(*inputs)] for _ in range(calls)]


def plans_setup(scratch: Path, n: int):
    from tests.format.plan_mutants import graph_and_constants, plan_mutants
    from tests.loader.test_memplan import _inputs

    paths = [ROOT / "tests" / "data" / f"{name}.pte" for name in PLAN_FILES]
    paths += [exported(scratch, name) for name in PLAN_EXAMPLES]
    files = []
    for path in paths:
        graph, constants = graph_and_constants(path)
        inputs = _inputs(graph)
        files.append((path.name, graph, constants, inputs, run_graph(graph, constants, inputs)[0]))
    rng = random.Random(SEED)
    cases = []
    for i in range(n):
        f = i % len(files)
        what, mutant = rng.choice(list(plan_mutants(files[f][1], seed=rng.randrange(2 ** 31), per_kind=2)))
        cases.append((f, what, mutant))
    return files, cases


def mutant_outcome(path: Path, graph, constants, inputs, want: list[np.ndarray], calls: int = 1) -> Outcome:
    """A mutant graph written to `path`: validated, then loaded and run `calls` times (each call must
    give `want`); refused where either refuses with a typed error and nothing ran wrong."""
    from tests.format.plan_mutants import write_graph
    from vkx.format import FormatError, validate
    from vkx.format.errors import VkxError
    refused = False
    try:
        validate(write_graph(path, graph, constants))
    except FormatError:
        refused = True
    try:
        runs = run_graph(graph, constants, inputs, calls)
    except VkxError:
        return Outcome(REFUSED)
    for call, got in enumerate(runs):
        if not same(got, want):
            return Outcome(WRONG, note=f"{'refused by validate, ' if refused else ''}call {call + 1} differs "
                                       f"from the unmutated program's")
    return Outcome(REFUSED if refused else RIGHT)


def plans_case(state, i: int, folder: Path) -> Outcome:
    files, cases = state
    f, what, mutant = cases[i]
    name, _, constants, inputs, want = files[f]
    outcome = mutant_outcome(folder / "m.pte", mutant, constants, inputs, want)
    outcome.note = outcome.note and f"{name}, {what}: {outcome.note}"
    return outcome


# -- an op writing a weight ---------------------------------------------------------------------------

def weights_setup(scratch: Path, n: int):
    from tests.format.plan_mutants import graph_and_constants
    from vkx.format import ProgramFile
    from vkx.format import vkgraph as vk
    from vkx.format.errors import VkxError
    from vkx.format.liveness import PREPACK
    from vkx.loader import load_graph

    files, candidates = [], []
    for path in sorted((ROOT / "tests" / "data").glob("*.pte")):
        with ProgramFile.open(path) as pf:
            if pf.vulkan is None:  # every op on the CPU
                continue
        external = [p for p in (path.with_suffix(".ptd"), path.with_suffix(".safetensors")) if p.exists()]
        graph, constants = graph_and_constants(path, external)
        try:
            load_graph(graph, constants).close()
        except VkxError:  # a graph only its ExecuTorch plan runs (ExecuTorch's LLM recipe: et_llm)
            continue
        values = graph.values
        prepacked = {call.args[-1] for call in graph.chain if call.name == PREPACK}
        weights = [vid for vid, v in enumerate(values) if isinstance(v, vk.Tensor)
                   and (v.constant_id >= 0 or vid in prepacked)]
        for op, call in enumerate(graph.chain):
            out = values[call.args[-1]] if call.args else None
            if not isinstance(out, vk.Tensor) or out.constant_id >= 0:
                continue
            for w in weights:
                if w != call.args[-1] and (values[w].datatype, values[w].dims) == (out.datatype, out.dims):
                    candidates.append((len(files), op, w))
        files.append((path.name, graph, constants))
    return files, sample(random.Random(SEED), candidates, n), {}


def weights_case(state, i: int, folder: Path) -> Outcome:
    from tests.loader.test_memplan import _inputs

    files, cases, answers = state
    f, op, weight = cases[i]
    name, graph, constants = files[f]
    if f not in answers:
        inputs = _inputs(graph)
        answers[f] = inputs, run_graph(graph, constants, inputs)[0]
    inputs, want = answers[f]
    call = graph.chain[op]
    again = dataclasses.replace(call, node_id=max(c.node_id for c in graph.chain) + 1, args=(*call.args[:-1], weight))
    mutant = dataclasses.replace(graph, chain=[*graph.chain[:op + 1], again, *graph.chain[op + 1:]])
    outcome = mutant_outcome(folder / "m.pte", mutant, constants, inputs, want, calls=2)
    outcome.note = outcome.note and f"{name}, op {op} ({call.name}) again into value {weight}: {outcome.note}"
    return outcome


# -- inputs that index memory -------------------------------------------------------------------------

def ranges_setup(scratch: Path, n: int):
    import vkx
    from tests.loader.test_input_ranges import CACHE, DATA, VOCAB
    from vkx.format.indexing import index_ranges
    from vkx.loader.lm.greedy import Argmax, GreedyChain

    decoder = vkx.load(exported(scratch, "kv_decoder"))
    llama = vkx.load(DATA / "et_llama_4w.pte", sequence_length=1)
    length = next(r.high for r in index_ranges(llama.only.graph) if r.what == "position")
    phi3 = vkx.load(DATA / "et_phi3.pte")
    gather = vkx.load(DATA / "et_op_cases" / "gather-fp32.pte")
    kinds = ["decode id", "decode position", "prefill id", "prefill position", "greedy steps", "et_llama id",
             "et_llama position", "et_phi3 id", "gather", "gather in range"]
    rng = random.Random(SEED)
    cases = [(kind, random.Random(rng.randrange(2 ** 31))) for kind in sample(rng, kinds * n, n)]
    decode = decoder["decode"]
    return dict(decoder=decoder, argmax=Argmax(decode), chain=GreedyChain(decode), llama=llama, phi3=phi3,
                gather=gather, vocab=VOCAB, cache=CACHE, length=length, llama_vocab=256), cases


def outside(rng: random.Random, high: int, bits: int = 64) -> int:
    """A value outside 0..high-1 (int32 inputs: within int32)."""
    big = 2 ** (bits - 1) - 1
    return rng.choice([high + rng.randrange(1000), -1 - rng.randrange(1000), rng.randrange(high, big),
                       -rng.randrange(1, big)])


def ranges_case(state, i: int, folder: Path) -> Outcome:
    from vkx.loader.errors import InputError

    s, cases = state
    kind, rng = cases[i]
    decode, prefill = s["decoder"]["decode"], s["decoder"]["prefill"]
    vocab, cache = s["vocab"], s["cache"]
    ids, pos = np.array([[rng.randrange(vocab)]]), np.array([rng.randrange(cache)])
    if kind == "gather in range":
        (src_shape, _), (index_shape, dtype) = s["gather"].input_specs
        src = np.random.default_rng(i).standard_normal(src_shape).astype(np.float32)
        index = np.random.default_rng(i).integers(-src_shape[-1], src_shape[-1], index_shape).astype(dtype)
        try:
            got = s["gather"](src, index)
        except InputError as error:
            return Outcome(WRONG, note=f"gather of in-range indices {index.ravel()} refused: {error}")
        want = np.take_along_axis(src, index % src_shape[-1], -1)  # dim -1: et_op_cases' gather
        return Outcome(RIGHT) if same([got], [want]) else Outcome(WRONG, note=f"gather of {index.ravel()}")
    if kind == "decode id":
        ids[0, 0] = outside(rng, vocab)
        call, args = rng.choice([decode.run_numpy, decode, s["argmax"]]), (ids, pos)
    elif kind == "decode position":
        pos[0] = outside(rng, cache)
        call, args = rng.choice([decode.run_numpy, decode, s["argmax"]]), (ids, pos)
    elif kind.startswith("prefill"):
        n = prefill.input_specs[1].shape[0]
        ids, pos = np.array([[rng.randrange(vocab) for _ in range(n)]]), np.arange(n)
        if kind == "prefill id":
            ids[0, rng.randrange(n)] = outside(rng, vocab)
        else:
            pos[rng.randrange(n)] = outside(rng, cache)
        call, args = prefill, (ids, pos)
    elif kind == "greedy steps":
        k = rng.randrange(1, cache)
        call, args = s["chain"], (ids, np.array([cache - k]), k + 1 + rng.randrange(8))
    elif kind.startswith("et_llama"):
        (id_shape, _), (pos_shape, _) = s["llama"].input_specs
        ids = np.zeros(id_shape, np.int32)
        pos = np.full(pos_shape, rng.randrange(s["length"]), np.int32)
        if kind == "et_llama id":
            ids.flat[rng.randrange(ids.size)] = outside(rng, s["llama_vocab"], 32)
        else:
            pos.flat[rng.randrange(pos.size)] = outside(rng, s["length"], 32)
        call, args = s["llama"], (ids, pos)
    elif kind == "et_phi3 id":
        import torch
        tokens = torch.randint(0, 64, (1, 16), generator=torch.Generator().manual_seed(i))
        tokens[0, rng.randrange(16)] = outside(rng, 64)
        call, args = s["phi3"], (tokens,)
    else:  # an index of a gather outside -n..n-1
        (src_shape, _), (index_shape, dtype) = s["gather"].input_specs
        index = np.zeros(index_shape, dtype)
        n = src_shape[-1]
        index.flat[rng.randrange(index.size)] = rng.choice([n + rng.randrange(1000), -n - 1 - rng.randrange(1000)])
        call, args = s["gather"], (np.ones(src_shape, np.float32), index)
    try:
        call(*args)
    except InputError:
        return Outcome(REFUSED)
    return Outcome(WRONG, note=f"{kind}: {[np.asarray(a).ravel().tolist() for a in args]} ran without an error")


# -- mismatched pairs ---------------------------------------------------------------------------------

def pairs_setup(scratch: Path, n: int):
    rng = random.Random(SEED)
    return [(rng.choice(["ptd", "safetensors"]), rng.choice(["given", "beside", "symlinked .pte", "matched"]),
             rng.randrange(2 ** 31), rng.randrange(2 ** 31)) for _ in range(n)]


def write_weights(pte: Path, external: Path, seed: int, pytree_in: str) -> None:
    """The tiny program with random weights under its own keys (as write_other: another export of
    the same model)."""
    from tests.format.fmt_tiny import tiny_graph, tiny_payloads
    from vkx.format import ConstantPayload, IOSpec, ScalarType, write_program

    rng = np.random.default_rng(seed)
    data: dict[str, bytes] = {}
    for p in tiny_payloads():
        data.setdefault(p.key, rng.standard_normal(p.nbytes // 4).astype(np.float32).tobytes())
    payloads = [ConstantPayload(p.key, p.nbytes, lambda d=data[p.key]: d) for p in tiny_payloads()]
    write_program(pte, tiny_graph(), payloads, [IOSpec(ScalarType.FLOAT, (1, 4))], [IOSpec(ScalarType.FLOAT, (1, 3))],
                  pytree_in=pytree_in, pytree_out="out", external_data=external)


def pairs_case(cases, i: int, folder: Path) -> Outcome:
    import vkx
    from tests.format.test_pair_identity import OTHER_PYTREE
    from vkx.format import FormatError, validate
    from vkx.format.errors import VkxError

    ext, way, seed_a, seed_b = cases[i]
    for sub in ("a", "b", "c"):
        (folder / sub).mkdir()
    a_pte, a_ext, b_ext = folder / "a" / "m.pte", folder / "a" / f"m.{ext}", folder / "b" / f"m.{ext}"
    write_weights(a_pte, a_ext, seed_a, "in")
    write_weights(folder / "b" / "m.pte", b_ext, seed_b, OTHER_PYTREE)
    want = file_answer(a_pte, [a_ext])[0]
    if way == "given":  # --external-data: another write's file
        pte, external = a_pte, [b_ext]
    elif way == "beside":  # the other's file copied over this one's (a kill between two renames leaves so)
        shutil.copyfile(b_ext, a_ext)
        pte, external = a_pte, []
    elif way == "symlinked .pte":  # c/m.pte -> a/m.pte beside another's c/m.ext: a's data is a/m.ext
        pte, external = folder / "c" / "m.pte", []
        pte.symlink_to(a_pte)
        shutil.copyfile(b_ext, folder / "c" / f"m.{ext}")
    else:
        pte, external = a_pte, []
    mixed = way in ("given", "beside")
    before = snapshot(folder)
    try:
        validate(pte, external or [a_ext])  # the file a load finds
        outcome = Outcome(WRONG, note=f"{way} pair of {ext} validated") if mixed else Outcome(RIGHT)
    except FormatError as error:
        outcome = Outcome(REFUSED) if mixed else Outcome(WRONG, note=f"{way} pair refused by validate: {error}")
    try:
        with vkx.load(pte, external) as program:
            got = program.run_numpy(X)[0]
        if mixed or not close_to(got, want):
            outcome = Outcome(WRONG, note=f"{way} pair of {ext}: ran, gave {got}; its own weights give {want[0]}")
    except VkxError as error:
        if not mixed:
            outcome = Outcome(WRONG, note=f"{way} pair of {ext} refused at load: {error}")
    return lost_if_changed(outcome, before, snapshot(folder))


# -- files changed under a load -----------------------------------------------------------------------

CHANGED_LAYOUTS = {"named": ("named", None), "legacy": ("legacy", None), "ptd": ("named", ".ptd"),
                   "safetensors": ("named", ".safetensors")}
UPLOADS = ["auto/lazy", "direct/lazy", "staging/lazy", "auto/eager", "import/lazy"]
ANSWER = r"""
import hashlib
from vkx.loader.execute import method
_run_numpy = method.Method.run_numpy
def _answered(self, *args, **kwargs):
    out = _run_numpy(self, *args, **kwargs)
    print("answer", hashlib.sha256(b"".join(o.tobytes() for o in out)).hexdigest(), flush=True)
    return out
method.Method.run_numpy = _answered
"""
"""Put before test_changed_file.CHILD: prints a digest of each call's outputs."""


def changed_setup(scratch: Path, n: int):
    from tests.loader import test_changed_file as t
    from tests.memory.chain_model import write_chain

    t.CHILD = ANSWER + t.CHILD  # what its _child runs (this process is a row's own)
    files, answers = {}, {}
    for name, (layout, ext) in CHANGED_LAYOUTS.items():
        (scratch / name).mkdir()
        pte, external = scratch / name / "m.pte", (scratch / name / f"m{ext}" if ext else None)
        write_chain(str(pte), 2, t.ELEMS, layout, str(external) if external else None)
        files[name] = (pte, external)
        proc = t._child("truncate", "never", "load", pte, pte, *([external] if external else []))
        assert proc.returncode == 0 and proc.stdout.startswith("answer"), proc.stderr[-2000:]
        answers[name] = proc.stdout.split()[-1]
    rng = random.Random(SEED)
    cases = []
    for _ in range(n):
        name, how, upload = rng.choice(list(files)), rng.choice(["truncate", "rewrite"]), rng.choice(UPLOADS)
        if upload == "import/lazy" and name in ("safetensors", "legacy"):
            name = "ptd"  # weights not page-aligned: import is refused whatever the file
        when = "after" if upload == "import/lazy" else rng.choice(["read", "read", "after", "upload", "metadata"])
        call = rng.choice(["load", "validate", "inspect"]) if when == "metadata" else "load"
        cases.append((name, how, when, call, upload, rng.randrange(4)))
    return t, files, answers, cases


def changed_case(state, i: int, folder: Path) -> Outcome:
    t, files, answers, cases = state
    name, how, when, call, upload, nth = cases[i]
    pte, external = files[name]
    pte, external = shutil.copy(pte, folder), (shutil.copy(external, folder) if external else None)
    victim = external if external and when != "metadata" else pte
    label = f"{name}, {how} at {when} (read {nth}), {call}, upload {upload}"
    try:
        proc = t._child(how, when, call, victim, pte, *([external] if external else []), upload=upload, nth=nth,
                        timeout=CHILD_SECONDS)
    except subprocess.TimeoutExpired:
        return Outcome(CRASH, note=f"{label}: no end in {CHILD_SECONDS} s")
    lines = proc.stdout.splitlines()
    if proc.returncode == 0:
        got = [line.split()[1] for line in lines if line.startswith("answer ")]
        if call == "load" and got != [answers[name]]:
            return Outcome(WRONG, note=f"{label}: ran, and its outputs are not the unchanged file's")
        return Outcome(RIGHT)
    if proc.returncode == 2:
        if call == "inspect" and proc.stderr.strip().splitlines()[-1].startswith("vkx: error: "):
            return Outcome(REFUSED)
        if lines and lines[-1].startswith("{") and json.loads(lines[-1])["type"] in ("BadFileError",
                                                                                      "FileChangedError"):
            return Outcome(REFUSED)
    return Outcome(CRASH, note=f"{label}: exit {proc.returncode}: {proc.stderr.strip()[-300:]}")


# -- what vkx export replaces -------------------------------------------------------------------------

EXPORT_HOSTILE = {
    "model": ["mlp.txt", "missing.py", "sub"],
    "output": [None, "mine.pte", "mlp.py", "notes.txt", "dir.pte", "fifo.pte", "link.pte", "other.pte",
               "nofolder/x.pte", "a\nb.pte", "ünï côde.pte", "-x.pte", "x" * 251 + ".pte", "y" * 300 + ".pte"],
    "external": ["other.ptd", "ckpt.safetensors", "new.ptd", "notes.txt", "same as -o"],
    "mlp.pte": ["a file of the user's", "a FIFO", "a symlink to notes.txt"],
}
"""What a case may change of `vkx export mlp.py -o new.pte`: one or two of these, at random."""
OWNED = {"other.ptd": "other.pte"}
"""An external file and the program written with it: `-o PTE --external-data EXT` may replace EXT."""


def exports_setup(scratch: Path, n: int):
    import torch

    from vkx.export.model_file import load_model_file
    module, inputs = load_model_file(ROOT / "examples" / "mlp.py")
    with torch.no_grad():
        want = module(*inputs).numpy()
    rng = random.Random(SEED)
    cases = []
    for _ in range(n):
        case = {"model": "mlp.py", "output": "new.pte", "external": None, "mlp.pte": "absent"}
        for aspect in rng.sample(["model", "output", "output", "external", "mlp.pte"], rng.choice([1, 1, 2])):
            case[aspect] = rng.choice(EXPORT_HOSTILE[aspect])
            if aspect == "mlp.pte":
                case["output"] = None  # the default output is MODEL.pte
        cases.append(tuple(case.values()))
    return [i.numpy() for i in inputs], want, cases


def user_folder(folder: Path, default_output: str) -> None:
    """A folder of a user's: the model, their notes and checkpoint, another program and its data, a
    folder, a FIFO, a symlink to the model; mlp.pte as `default_output` says ("absent": none)."""
    from safetensors.numpy import save_file

    from tests.cli.test_export_safety import MLP, model
    from tests.format.fmt_tiny import write_tiny

    model(folder / "mlp.py")
    model(folder / "mlp.txt", MLP)
    (folder / "notes.txt").write_text("the user's notes\n")
    (folder / "mine.pte").write_bytes(b"a file of the user's")
    save_file({"w": np.arange(3, dtype=np.float32)}, folder / "ckpt.safetensors")
    write_tiny(folder / "other.pte", external_data=folder / "other.ptd")
    (folder / "dir.pte").mkdir()
    (folder / "sub").mkdir()
    os.mkfifo(folder / "fifo.pte")
    (folder / "link.pte").symlink_to("mlp.py")
    if default_output == "a file of the user's":
        (folder / "mlp.pte").write_bytes(b"not an export of mlp.py")
    elif default_output == "a FIFO":
        os.mkfifo(folder / "mlp.pte")
    elif default_output == "a symlink to notes.txt":
        (folder / "mlp.pte").symlink_to("notes.txt")


def exports_case(state, i: int, folder: Path) -> Outcome:
    import vkx
    from tests.cli.conftest import vkx as run_vkx
    from vkx.format import FormatError, validate
    from vkx.format.errors import VkxError

    inputs, want, cases = state
    model, output, external, default_output = cases[i]
    if external == "same as -o":
        external = output or "mlp.pte"
    user_folder(folder, default_output)
    args = ["export", model, "-q", *(["-o", output] if output else []), *(["--external-data", external] if external
                                                                         else [])]
    label = f"vkx {' '.join(map(repr, args))} (mlp.pte: {default_output})"
    before = snapshot(folder)
    try:
        done = run_vkx(*args, cwd=folder, timeout=CHILD_SECONDS)
    except subprocess.TimeoutExpired:
        return Outcome(CRASH, note=f"{label}: no end in {CHILD_SECONDS} s")
    after = snapshot(folder)
    allowed = {output} if output else set()
    if done.returncode == 0 and external and OWNED.get(external) == output:
        allowed.add(external)
    if done.returncode == 2 and done.stdout == "" and done.stderr.startswith("vkx: error: ") \
            and "Traceback" not in done.stderr:
        lines = done.stderr.count("\n")
        outcome = Outcome(REFUSED, note="" if lines == 1 else f"{label}: {lines} lines on stderr: {done.stderr!r}")
        if "File name too long" in done.stderr and len(os.fsencode(Path(output or "mlp.pte").name)) <= 255:
            outcome.note = f"{label}: a name the filesystem takes, refused: {done.stderr.strip()[-120:]}"
    elif done.returncode == 0:
        pte = folder / (output or "mlp.pte")
        ext = [folder / external] if external else []
        try:
            validate(pte, ext)
            with vkx.load(pte, ext) as program:
                got = program.run_numpy(*inputs)[0]
            outcome = Outcome(RIGHT) if np.allclose(got, want, rtol=1e-4, atol=1e-5) else \
                Outcome(WRONG, note=f"{label}: the program written does not give torch's answer")
        except (FormatError, VkxError) as error:
            outcome = Outcome(WRONG, note=f"{label}: exit 0, but its output is refused: {error}")
    else:
        outcome = Outcome(CRASH, note=f"{label}: exit {done.returncode}: {done.stderr.strip()[-300:]}")
    outcome.note = outcome.note or (f"{label}: left {left}" if (left := leftovers(folder)) else "")
    return lost_if_changed(outcome, before, after, allowed)


# -- a write killed -----------------------------------------------------------------------------------

KILL = r"""
import os, signal, sys
from pathlib import Path
from tests.format.fmt_tiny import write_tiny
from tests.format.test_pair_identity import write_other
writer, pte, external, nth = sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
calls = 0
def dying(real):
    def call(*args, **kwargs):
        global calls
        calls += 1
        if calls == nth:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)
    return call
for name in ("open", "write", "pwrite", "fsync", "link", "replace", "rename", "unlink", "close"):
    setattr(os, name, dying(getattr(os, name)))
external = Path(external) if external else None
write_tiny(pte, external_data=external) if writer == "tiny" else write_other(pte, external)
print(calls)
"""
"""A write of the tiny program (or of write_other's), killed at the nth system call it makes (0: none)."""
WRITERS = ("tiny", "other")
EXTERNAL_KINDS = ("", ".ptd", ".safetensors")


def command(*argv, limit: int | None = None) -> subprocess.CompletedProcess:
    """Run `argv` in the repository, with a file-size limit in bytes (RLIMIT_FSIZE: a write past it
    fails with EFBIG, as one onto a full disk fails with ENOSPC) where one is given."""
    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return subprocess.run(list(map(str, argv)), cwd=ROOT, capture_output=True, text=True, timeout=CHILD_SECONDS,
                          preexec_fn=small_files if limit is not None else None)


def reference_pairs(scratch: Path) -> dict:
    """(writer, external suffix) -> (.pte bytes, external bytes, what the program computes)."""
    from tests.format.fmt_tiny import write_tiny
    from tests.format.test_pair_identity import write_other

    out = {}
    for writer in WRITERS:
        for ext in EXTERNAL_KINDS:
            folder = scratch / f"{writer}{ext}"
            folder.mkdir()
            pte, external = folder / "m.pte", ([folder / f"m{ext}"] if ext else [])
            target = external[0] if ext else None
            write_tiny(pte, external_data=target) if writer == "tiny" else write_other(pte, target)
            out[writer, ext] = (pte.read_bytes(), external[0].read_bytes() if ext else None,
                                file_answer(pte, external))
    return out


def kill_setup(scratch: Path, n: int):
    refs = reference_pairs(scratch)
    calls = {}
    for writer in WRITERS:
        for ext in EXTERNAL_KINDS:
            folder = scratch / f"dry-{writer}{ext}"
            folder.mkdir()
            done = command(sys.executable, "-c", KILL, writer, folder / "m.pte", folder / f"m{ext}" if ext else "", 0)
            calls[writer, ext] = int(done.stdout)
    rng = random.Random(SEED)
    cases = []
    for _ in range(n):
        new, ext = rng.choice(WRITERS), rng.choice(EXTERNAL_KINDS)
        cases.append((new, ext, rng.randint(1, calls[new, ext] + 1)))  # calls + 1: the write ends
    return refs, calls, cases


def pair_state(folder: Path, ext: str, refs: dict, old: str, new: str, label: str) -> tuple[Outcome, str | None]:
    """After a write of `new`'s pair over `old`'s failed or was killed: lost unless each file is whole
    (old or new bytes), refused where validate or the load refuses the pair, else judged against the
    answer of the program whose .pte is there. Also the writer whose .pte is there (None: neither)."""
    from vkx.format import FormatError, validate
    pte, external = folder / "m.pte", ([folder / f"m{ext}"] if ext else [])
    files = [path.read_bytes() if path.exists() else None for path in [pte, *external]]
    broken = [path.name for k, path in enumerate([pte, *external]) if files[k] not in (refs[old, ext][k],
                                                                                          refs[new, ext][k])]
    if broken:
        return Outcome(CRASH, lost=True, note=f"{label}: {', '.join(broken)} neither the old file nor the new"), None
    owner = old if files[0] == refs[old, ext][0] else new
    try:
        validate(pte, external)
    except FormatError as error:
        mixed = ext and files[1] != refs[owner, ext][1]
        return (Outcome(REFUSED) if mixed else Outcome(WRONG, note=f"{label}: a whole pair refused: {error}")), owner
    return run_tiny(pte, external, refs[owner, ext][2], None), owner


def kill_case(state, i: int, folder: Path) -> Outcome:
    from tests.format.fmt_tiny import write_tiny
    from tests.format.test_pair_identity import write_other

    refs, calls, cases = state
    new, ext, nth = cases[i]
    old = WRITERS[1 - WRITERS.index(new)]
    pte = folder / "m.pte"
    external = folder / f"m{ext}" if ext else None
    write_tiny(pte, external_data=external) if old == "tiny" else write_other(pte, external)
    label = f"{new} over {old} (external {ext or 'none'}) killed at call {nth} of {calls[new, ext]}"
    try:
        done = command(sys.executable, "-c", KILL, new, pte, external or "", nth)
    except subprocess.TimeoutExpired:
        return Outcome(CRASH, note=f"{label}: no end in {CHILD_SECONDS} s")
    if done.returncode not in (0, -signal.SIGKILL):
        return Outcome(CRASH, note=f"{label}: exit {done.returncode}: {done.stderr.strip()[-300:]}")
    outcome, _ = pair_state(folder, ext, refs, old, new, label)
    write_tiny(pte, external_data=external)  # the next write removes what a killed one left
    if left := leftovers(folder):
        outcome.note = f"{outcome.note}; {label}: the next write left {left}".lstrip("; ")
    return outcome


# -- a full disk --------------------------------------------------------------------------------------

DISK = r"""
import sys
from pathlib import Path
from tests.format.fmt_tiny import write_tiny
from vkx.format.errors import VkxError
pte, external = Path(sys.argv[1]), sys.argv[2]
try:
    write_tiny(pte, **({"external_data": Path(external)} if external else {}))
except VkxError as error:
    print(type(error).__name__, error)
    sys.exit(2)
"""
"""The tiny program written (write_program, what vkx export writes with) under a file-size limit."""


def disk_setup(scratch: Path, n: int):
    from safetensors.numpy import save_file

    from tests.format.conftest import GOLDEN
    refs = reference_pairs(scratch)
    save_file({"x": X}, scratch / "in.safetensors")
    rng = random.Random(SEED)
    cases = []
    for _ in range(n):
        what = rng.choice(["writer"] * 3 + ["vkx run --output"])
        ext = rng.choice(EXTERNAL_KINDS)
        largest = 400 if what != "writer" else max(len(b or b"") for b in refs["tiny", ext][:2])
        cases.append((what, ext, rng.randrange(largest + 100)))
    return refs, GOLDEN / "tiny_named.pte", scratch / "in.safetensors", cases


def disk_case(state, i: int, folder: Path) -> Outcome:
    from safetensors.numpy import load_file

    from tests.cli.conftest import VKX
    from tests.format.test_pair_identity import write_other

    refs, program, inputs, cases = state
    what, ext, limit = cases[i]
    label = f"{what} (external {ext or 'none'}) under a {limit}-byte file-size limit"
    if what == "vkx run --output":
        out = folder / "out.safetensors"
        out.write_bytes(b"the user's earlier outputs")
        before = snapshot(folder)
        try:
            done = command(VKX, "run", program, "--inputs", inputs, "--repeat", "1", "--output", out, limit=limit)
        except subprocess.TimeoutExpired:
            return Outcome(CRASH, note=f"{label}: no end in {CHILD_SECONDS} s")
        if done.returncode == 0:
            got = load_file(out)["output_0"]
            right = close_to(got, refs["tiny", ""][2][0])
            outcome = Outcome(RIGHT) if right else Outcome(WRONG, note=f"{label}: the file holds {got}")
        elif done.returncode == 2 and done.stderr.count("\n") == 1 and done.stderr.startswith("vkx: error: "):
            outcome = Outcome(REFUSED)
        else:
            outcome = Outcome(CRASH, note=f"{label}: exit {done.returncode}: {done.stderr.strip()[-300:]}")
        if left := leftovers(folder):
            outcome.note = f"{outcome.note}; {label}: left {left}".lstrip("; ")
        return lost_if_changed(outcome, before, snapshot(folder), {out.name} if done.returncode == 0 else set())
    pte = folder / "m.pte"
    write_other(pte, folder / f"m{ext}" if ext else None)
    try:
        done = command(sys.executable, "-c", DISK, pte, folder / f"m{ext}" if ext else "", limit=limit)
    except subprocess.TimeoutExpired:
        return Outcome(CRASH, note=f"{label}: no end in {CHILD_SECONDS} s")
    if done.returncode not in (0, 2) or (done.returncode == 2 and not done.stdout.startswith("WriteError ")):
        return Outcome(CRASH, note=f"{label}: exit {done.returncode}: {done.stdout.strip()} {done.stderr[-300:]}")
    outcome, owner = pair_state(folder, ext, refs, "other", "tiny", label)
    if done.returncode == 2 and owner == "tiny" or done.returncode == 0 and owner == "other":
        outcome = Outcome(WRONG, note=f"{label}: exit {done.returncode}, and the .pte there is {owner}'s")
    elif done.returncode == 2 and outcome.kind == RIGHT:
        outcome.kind = REFUSED  # the write was refused; the old pair is whole and runs
    if left := leftovers(folder):
        outcome.note = f"{outcome.note}; {label}: left {left}".lstrip("; ")
    return outcome


# -- a hostile pipeline cache -------------------------------------------------------------------------

CACHE_KINDS = ["a FIFO", "a symlink to /dev/zero", "a symlink to a file of the user's", "64 GiB (sparse)",
               "a folder", "bytes mutated", "bytes mutated", "re-signed, bytes mutated",
               "re-signed, driver data appended", "re-signed, driver header size grown"]


def cache_setup(scratch: Path, n: int):
    import vkx
    from tests.format.conftest import GOLDEN
    from tests.format.test_fmt_mutation import _mutations
    from vkx.loader.gpu import pipeline_cache
    from vkx.loader.gpu.device import Device

    os.environ["XDG_CACHE_HOME"] = str(scratch / "cache")  # this child's: a cache of its own
    device = Device()
    identity = pipeline_cache.Identity.of(device.physical)
    with vkx.load(GOLDEN / "tiny_named.pte", device=device) as program:
        want = program.run_numpy(X)
    device.close()  # writes the cache file
    path = pipeline_cache.cache_path(identity)
    blob = path.read_bytes()
    rng = random.Random(SEED)
    mutations = [data for _, data in _mutations(blob)]
    cases = [(kind, rng.choice(mutations) if "mutated" in kind else rng.randrange(2 ** 31))
             for kind in (rng.choice(CACHE_KINDS) for _ in range(n))]
    return GOLDEN / "tiny_named.pte", path, pipeline_cache.unpack(blob, identity), want, cases


def hostile_cache(path: Path, kind: str, detail, kept: tuple, user: Path) -> None:
    """Put a cache file of `kind` at `path` (`kept`: the valid file's keys and driver data)."""
    from vkx.loader.gpu import pipeline_cache as pc

    def signed(rest: bytes) -> bytes:  # what an attacker who knows the format writes
        return pc.MAGIC + hashlib.sha256(rest).digest() + rest
    rng = random.Random(detail)
    if kind == "a FIFO":
        os.mkfifo(path)
    elif kind.startswith("a symlink"):
        path.symlink_to("/dev/zero" if kind.endswith("/dev/zero") else user)
    elif kind == "64 GiB (sparse)":
        with open(path, "wb") as f:
            f.truncate(64 << 30)
    elif kind == "a folder":
        path.mkdir()
    elif kind == "bytes mutated":
        path.write_bytes(detail)
    elif kind == "re-signed, bytes mutated":
        path.write_bytes(signed(detail[len(pc.MAGIC) + 32:]))
    else:
        keys, data = kept
        extra = rng.randbytes(rng.randrange(1, 4096))
        if kind == "re-signed, driver header size grown":
            size, *rest = pc.DRIVER_HEADER.unpack_from(data)
            data = pc.DRIVER_HEADER.pack(size + len(extra), *rest) + data[pc.DRIVER_HEADER.size:]
        path.write_bytes(pc.pack(keys, data + extra))


def cache_case(state, i: int, folder: Path) -> Outcome:
    import vkx
    from vkx.format.errors import VkxError
    from vkx.loader.gpu.device import Device

    program, path, kept, want, cases = state
    kind, detail = cases[i]
    if path.is_dir() and not path.is_symlink():
        path.rmdir()
    else:
        path.unlink(missing_ok=True)
    user = folder / "notes.txt"
    user.write_text("the user's notes\n")
    hostile_cache(path, kind, detail, kept, user)
    before = snapshot(folder)
    device = Device()
    try:
        with vkx.load(program, device=device) as loaded:
            got = loaded.run_numpy(X)
        outcome = Outcome(RIGHT) if same(got, want) else Outcome(WRONG, note=f"cache {kind}: gave {got}")
    except VkxError as error:  # typed, but the cache should have been ignored
        outcome = Outcome(REFUSED, note=f"cache {kind}: the load failed instead of ignoring it: {error}")
    finally:
        device.close()
    return lost_if_changed(outcome, before, snapshot(folder))


# -- the rows -----------------------------------------------------------------------------------------

ROWS = [
    Row("bytes of the tests' golden .pte, .ptd and .safetensors set to 0x00, 0xFF or one bit flipped, or cut "
        "(tests/format/test_fmt_mutation.py), or edited 1 to 8 times (test_fmt_fuzz.py); validated, inspected, "
        "run, and judged against what the file's own bytes compute", 1000, bytes_setup, bytes_case),
    Row("memory plans and chains mutated (tests/format/plan_mutants.py: objects moved or merged, ops swapped, "
        "the chain reversed or cut, outputs redirected, writers removed) in 6 ExecuTorch files of tests/data "
        "and 2 vkx exports of examples/", 10, plans_setup, plans_case),
    Row("an op of tests/data/*.pte repeated right after itself, writing a weight (a constant or a prepack "
        "output) of its dtype and shape; run twice", 8, weights_setup, weights_case),
    Row("a token id, position or gather index outside its table (the entry points of "
        "tests/loader/test_input_ranges.py: method calls, an argmax, chained greedy steps, prefill, ExecuTorch's "
        "recipe, a plan with CPU ops), and gather indices inside it", 10, ranges_setup, ranges_case),
    Row("a .pte with another write's .ptd or .safetensors (same keys and shapes, other weights): given, copied "
        "beside it, or beside a symlink to it; and whole pairs (tests/format/test_pair_identity.py)", 6,
        pairs_setup, pairs_case),
    Row("a .pte, .ptd or .safetensors truncated or rewritten in place while a load, `validate` or `inspect` "
        "reads it, or after the load, on each upload path (tests/loader/test_changed_file.py)", 1,
        changed_setup, changed_case),
    Row("`vkx export` onto its model, a file of the user's, another program's data, a folder, a FIFO, a "
        "symlink, a missing folder or a hostile name (a newline, 255+ bytes) "
        "(tests/cli/test_export_safety.py)", 2, exports_setup, exports_case),
    Row("a write of a .pte alone or with its .ptd / .safetensors over an older pair, killed (SIGKILL) at a "
        "random system call (format/atomic.py)", 3, kill_setup, kill_case),
    Row("a full disk (a random RLIMIT_FSIZE): a .pte and its external data written over an older pair, "
        "`vkx run --output` over an older file", 2, disk_setup, disk_case),
    Row("a hostile pipeline cache (loader/gpu/pipeline_cache.py): a FIFO, a symlink to /dev/zero or to a user's "
        "file, 64 GiB, a folder, corrupt bytes, data re-signed with a valid digest; ignored, the load runs",
        4, cache_setup, cache_case),
]


# -- running them -------------------------------------------------------------------------------------

def worker(row: int, count: int, start: int, scratch: str, conn) -> None:
    """One row's cases from `start` on, each outcome sent as it ends; output goes to scratch/log."""
    log = os.open(os.path.join(scratch, "log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    r = ROWS[row]
    n = r.per_count * count
    setup = Path(scratch) / f"setup-{start}"
    setup.mkdir()
    state = r.setup(setup, n)
    conn.send(("ready",))
    for i in range(start, n):
        folder = Path(scratch) / f"case-{i}"
        folder.mkdir()
        try:
            outcome = r.case(state, i, folder)
        except Exception as error:  # anything the case did not foresee: a traceback
            import traceback
            traceback.print_exc()
            outcome = Outcome(CRASH, note=f"case {i}: {type(error).__name__}: {str(error)[:300]}")
        shutil.rmtree(folder, ignore_errors=True)
        conn.send((i, outcome.kind, outcome.lost, outcome.note))
    conn.send(("done",))


def log_tail(scratch: Path) -> str:
    """The last lines a row's children wrote, for a crash's note."""
    try:
        return " | ".join((scratch / "log").read_text(errors="replace").strip().splitlines()[-3:])[-500:]
    except OSError:
        return ""


def run_row(row: int, count: int, scratch: Path) -> dict[str, Any]:
    """Run one row in child processes (a new one after each crash); its counts and notes."""
    context = multiprocessing.get_context("spawn")
    n = ROWS[row].per_count * count
    tally: Counter = Counter()
    notes: list[str] = []
    start, began = 0, time.monotonic()
    while start < n:
        receive, send = context.Pipe(duplex=False)
        child = context.Process(target=worker, args=(row, count, start, str(scratch), send), daemon=True)
        child.start()
        send.close()
        ready, message = False, None
        while True:
            if not receive.poll(CASE_SECONDS if ready else SETUP_SECONDS):
                message = None
                break
            try:
                message = receive.recv()
            except EOFError:
                message = None
                break
            if message[0] == "ready":
                ready = True
            elif message[0] == "done":
                break
            else:
                i, kind, lost, note = message
                tally[kind] += 1
                tally["lost"] += lost
                if note:
                    notes.append(f"{kind}{', lost' if lost else ''}: {note}")
                start = i + 1
        if message is not None:
            child.join()
            break
        child.kill()
        child.join()
        if not ready:
            raise SetupError(f"{ROWS[row].name[:60]}...: the row's set-up failed (exit {child.exitcode}): "
                             f"{log_tail(scratch)}")
        how = f"no answer in {CASE_SECONDS} s" if child.exitcode == -signal.SIGKILL else f"exit {child.exitcode}"
        tally[CRASH] += 1
        notes.append(f"{CRASH}: case {start}: the child ended ({how}): {log_tail(scratch)}")
        start += 1
    return {"name": ROWS[row].name, "tried": n, **{k: tally[k] for k in (REFUSED, RIGHT, WRONG, CRASH, "lost")},
            "seconds": round(time.monotonic() - began, 1), "notes": notes}


class SetupError(Exception):
    """A row could not start: no finding about vkx, the run stops."""


def table(results: list[dict], count: int, device: str, seconds: float) -> str:
    """The markdown table, what it was run with, and the notes of the cases that left one."""
    lines = ["| " + " | ".join(HEADER) + " |", "|---|" + "---|" * (len(HEADER) - 1)]
    for r in results:
        counts = (r[k] for k in ("tried", REFUSED, RIGHT, WRONG, CRASH, "lost"))
        lines.append(f"| {r['name']} | " + " | ".join(map(str, counts)) + " |")
    lines += ["", f"`bench/reliability.py --count {count}` on {device}, {seconds:.0f} s."]
    notes = [note.replace("\n", " ") for r in results for note in r["notes"]]
    if notes:
        lines += ["", "Cases that left a note:", "", *(f"* {note}" for note in notes)]
    return "\n".join(lines)


def positive(text: str) -> int:
    """argparse's type of --count."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="reliability.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=positive, default=DEFAULT_COUNT, metavar="N",
                        help=f"scale of every row: each tries N times its own number of cases (default "
                             f"{DEFAULT_COUNT})")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--write", action="store_true", help="put the table into docs/safety.md, between its markers")
    args = parser.parse_args(argv)
    if args.write:
        text = DOC.read_text() if DOC.is_file() else ""
        if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
            parser.error(f"--write: {DOC} has no place for the table (one {BEGIN} and, after it, one {END})")
    began = time.monotonic()
    results = []
    with tempfile.TemporaryDirectory(prefix="vkx-reliability-",
                                     dir="/dev/shm" if os.access("/dev/shm", os.W_OK) else None) as scratch:
        for row in range(len(ROWS)):
            folder = Path(scratch) / str(row)
            folder.mkdir()
            try:
                r = run_row(row, args.count, folder)
            except SetupError as error:
                print(f"reliability.py: {error}", file=sys.stderr)
                return 1
            results.append(r)
            print(f"reliability: {r['tried']} tried, {r[REFUSED]} refused, {r[RIGHT]} right, {r[WRONG]} wrong, "
                  f"{r[CRASH]} crashes, {r['lost']} lost ({r['seconds']} s): {r['name'][:70]}...", file=sys.stderr,
                  flush=True)
    from vkx.loader.gpu.device import default_device
    device = default_device().name
    seconds = time.monotonic() - began
    markdown = table(results, args.count, device, seconds)
    if args.write:
        text = DOC.read_text()
        head, _, rest = text.partition(BEGIN)
        _, _, tail = rest.partition(END)
        DOC.write_text(f"{head}{BEGIN}\n{markdown}\n{END}{tail}")
    if args.json:
        print(json.dumps({"count": args.count, "device": device, "seconds": round(seconds, 1), "rows": results}))
    else:
        print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
