"""Hugging Face causal LMs: a model folder → a transformers module with a static KV cache.

A folder holds `config.json`, optionally `model.safetensors` (or shards listed in
`model.safetensors.index.json`) and `tokenizer.json`. The module is built with its parameters
on the meta device and the checkpoint's tensors are assigned to it straight from read-only
file mappings, so the weights are in memory once. Without weight files the architecture gets
random weights of real magnitude. `CausalLM` wraps the model for export: one forward
`(input_ids [1, n], cache_position [n]) -> logits [1, 1, vocab]` (the last position's: the only
ones generation reads; fp32 whatever the model's dtype) that writes its keys and values into
per-layer cache buffers at `cache_position` (`index_copy_`), exported twice: `prefill` (n = the
prefill length) and `decode` (n = 1); and `score`, every position's logits, for perplexity.
docs/architecture.md describes it.
"""
from __future__ import annotations

import contextlib
import copy
import inspect
import json
import mmap
import os
from dataclasses import dataclass
from pathlib import Path
import torch

from vkx.export.api import ExportReport, check_dtype, export_model
from vkx.export.constants import Reference, identity
from vkx.export.dtypes import torch_dtype
from vkx.export.errors import ExportError
from vkx.export.stamp import Repeated
from vkx.export.trace import convert
from vkx.export.widen import widen_bf16
from vkx.format import dtypes
from vkx.format.metadata import ProgramMetadata
from vkx.format.methods import SCORE

try:
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.cache_utils import Cache, StaticLayer
except ImportError as error:  # an optional dependency: vkx[llm]
    raise ExportError("exporting a Hugging Face folder needs transformers: pip install 'vkx[llm]'") from error

FAMILIES = ("llama", "qwen2", "qwen3", "mistral", "phi3", "gpt2")
CONFIG = "config.json"
SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"
TOKENIZER = "tokenizer.json"
GENERATION_CONFIG = "generation_config.json"

@dataclass(frozen=True)
class Folder:
    """What a Hugging Face model folder holds."""

    path: Path
    weights: tuple[Path, ...]
    """The safetensors files, in order; empty: random weights."""
    tokenizer: Path | None


def is_model_folder(path: str | Path) -> bool:
    """A directory with a config.json (what `vkx export DIR` takes)."""
    return Path(path).is_dir() and (Path(path) / CONFIG).is_file()


def read_folder(path: str | Path) -> Folder:
    """The config, weight files and tokenizer of a model folder; ExportError if it is not one."""
    path = Path(path)
    if not is_model_folder(path):
        raise ExportError(f"{path} is not a Hugging Face model folder (no {CONFIG})")
    if (path / SINGLE).is_file():
        weights: tuple[Path, ...] = (path / SINGLE,)
    elif (path / INDEX).is_file():
        try:
            weight_map = json.loads((path / INDEX).read_text())["weight_map"]
        except (ValueError, KeyError, TypeError) as error:
            raise ExportError(f"{path / INDEX}: not a safetensors index ({error})") from error
        weights = tuple(path / name for name in sorted(set(weight_map.values())))
        missing = [str(p) for p in weights if not p.is_file()]
        if missing:
            raise ExportError(f"{path / INDEX} lists shards that are missing: {', '.join(missing)}")
    else:
        weights = ()
    tokenizer = path / TOKENIZER
    return Folder(path, weights, tokenizer if tokenizer.is_file() else None)


def load_config(folder: Folder):
    """The folder's transformers config; ExportError for a family vkx does not export."""
    try:
        config = AutoConfig.from_pretrained(str(folder.path), local_files_only=True)
    except (OSError, ValueError, KeyError) as error:
        raise ExportError(f"{folder.path / CONFIG}: {' '.join(str(error).split())}") from error
    if config.model_type not in FAMILIES:
        raise ExportError(f"{folder.path / CONFIG}: model_type {config.model_type!r} is not one of "
                          f"{', '.join(FAMILIES)}")
    return config


def check_lengths(path: str | Path, max_seq_len: int | None = None, prefill_len: int | None = None) -> tuple[int, int]:
    """The cache length (default: 512, or the model's positions if fewer) and prefill length
    (default 32, at most the cache length) to export a folder with; ExportError if they do not fit."""
    config = load_config(read_folder(path)).get_text_config()
    positions = getattr(config, "max_position_embeddings", None) or max_seq_len or 512
    max_seq_len = max_seq_len or min(512, positions)
    prefill_len = prefill_len or min(32, max_seq_len)
    if not 1 <= prefill_len <= max_seq_len <= positions:
        raise ExportError(f"need 1 <= prefill length ({prefill_len}) <= max sequence length ({max_seq_len}) "
                          f"<= the model's {positions} positions")
    return max_seq_len, prefill_len


def export_folder(path: str | Path, output: str | Path, *, max_seq_len: int | None = None,
                  prefill_len: int | None = None, dtype: str = "keep", external_data: str | Path | None = None,
                  score: bool = False, **options) -> ExportReport:
    """Export a model folder to a program of methods prefill (`[1, prefill_len]`) and decode (`[1, 1]`),
    each giving the last position's fp32 logits, and with `score` a third, score (`[1, max_seq_len]`,
    every position's: what `vkx perplexity` reads), whose state is the KV cache of `max_seq_len`
    positions (check_lengths' defaults), recording the config's EOS token ids; `options` go to
    `export_model` (`quantize_head` applies to the model's output projection).

    `external_data` naming the folder's checkpoint (checkpoint_files) exports weights by
    reference: every tensor used as the checkpoint stores it stays there, named by its
    checkpoint key; the others (cast, quantized, computed) go into the .pte itself.
    """
    max_seq_len, prefill_len = check_lengths(path, max_seq_len, prefill_len)
    folder = read_folder(path)
    by_reference = external_data is not None and checkpoint_files(folder, external_data)
    references: dict[tuple, Reference] = {}
    lm = causal_lm(folder, max_seq_len, dtype, references)
    methods = {"prefill": (torch.zeros(1, prefill_len, dtype=torch.long), torch.arange(prefill_len)),
               "decode": (torch.zeros(1, 1, dtype=torch.long), torch.zeros(1, dtype=torch.long))}
    if score:
        methods[SCORE] = (lm.score, (torch.zeros(1, max_seq_len, dtype=torch.long), torch.arange(max_seq_len)))
    return export_model(lm, methods, output, external_data=None if by_reference else external_data,
                        references=references if by_reference else None,
                        metadata=ProgramMetadata(eos_token_ids=eos_token_ids(folder, lm.config)),
                        repeated=lm.repeated(), **options)


def causal_lm(folder: Folder, max_seq_len: int, dtype: str = "keep",
              references: dict[tuple, Reference] | None = None) -> "CausalLM":
    """The folder's model wrapped as export_folder exports it: its tensors in `dtype` (check_dtype's
    choices), the rotary tables in fp32; a model whose weights are then bf16 keeps its matrices bf16
    and computes in fp32 (vkx.export.widen). `references` as build_model's."""
    stored = check_dtype(dtype)
    model = build_model(folder, torch_dtype(stored) if stored else None, references=references)
    lm = CausalLM(model, max_seq_len)
    if (torch_dtype(stored) if stored else model.dtype) == torch.bfloat16:
        widen_bf16(lm)  # in place: the model is this call's own
    elif stored is not None:
        lm, _ = convert(lm, (), stored)
    fp32_rotary(lm, model.config)  # after the conversion, not by export_model: the rotary tables stay fp32
    return lm


def checkpoint_files(folder: Folder, external_data: str | Path) -> bool:
    """Whether `external_data` names the folder's checkpoint: the folder itself, its
    model.safetensors, its shard index or one of the shards (all shards are then referenced).
    False for a file outside the folder (vkx writes it); ExportError for any other file in the
    folder, or a folder without a checkpoint (vkx never writes into a model folder)."""
    target = Path(external_data).resolve()
    index = folder.path / INDEX
    named = {p.resolve() for p in (folder.path, *folder.weights, *([index] if index.is_file() else []))}
    inside = target.is_relative_to(folder.path.resolve())
    if inside and not folder.weights:
        raise ExportError(f"external data {external_data}: {folder.path} has no checkpoint to reference "
                          f"(no {SINGLE}, no {INDEX})")
    if target in named:
        return True
    if inside:
        spelled = f"{folder.path / SINGLE}" if (folder.path / SINGLE).is_file() else f"{index} (or a shard)"
        raise ExportError(f"external data {external_data} is inside the model folder but is not its checkpoint: "
                          f"name {spelled} or the folder to reference the weights, or a file outside it to write them")
    return False


def eos_token_ids(folder: Folder, config) -> tuple[int, ...]:
    """The config's `eos_token_id` (an int or a list), else generation_config.json's; () for none."""
    eos = getattr(config.get_text_config(), "eos_token_id", None)
    generation = folder.path / GENERATION_CONFIG
    if eos is None and generation.is_file():
        try:
            eos = json.loads(generation.read_text()).get("eos_token_id")
        except (OSError, ValueError, AttributeError) as error:
            raise ExportError(f"{generation}: not a generation config ({error})") from error
    ids = [] if eos is None else [eos] if isinstance(eos, int) else eos
    if not isinstance(ids, list) or not all(type(t) is int and t >= 0 for t in ids):
        raise ExportError(f"{folder.path}: eos_token_id {eos!r} is not a token id or a list of them")
    return tuple(dict.fromkeys(ids))


def build_model(folder: Folder, dtype: torch.dtype | None = None, seed: int = 0,
                references: dict[tuple, Reference] | None = None) -> torch.nn.Module:
    """The folder's causal LM in eval mode, with sdpa attention.

    With weight files the tensors keep the checkpoint's dtype (`dtype` is for export to
    convert); without, random weights in `dtype` (default: the config's, else fp32) whose
    logits have a standard deviation near one. `references` receives, by `identity()`, the
    checkpoint's name and file of each parameter that is a view of the checkpoint's bytes.
    """
    config = load_config(folder)
    if not folder.weights:
        dtype = dtype or config.dtype or torch.float32
        # Weights of std 1/sqrt(hidden) keep every projection near unit scale, so logits are
        # about N(0, 1) and greedy choices are not near-ties (transformers' default 0.02 gives
        # logits too flat to compare token by token).
        config.initializer_range = config.hidden_size ** -0.5
        torch.manual_seed(seed)
        # drawn in fp32 whatever `dtype`: transformers versions differ in the dtype they initialise
        # in, and the draws (so the weights) with it; rounded afterwards, every version gets the same
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="sdpa")
        return model.to(dtype).eval()
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    _rebuild_buffers(model)
    assign_weights(model, folder.weights, references)
    return model.eval()


def fp32_rotary(model: torch.nn.Module, config) -> None:
    """Build each rotary embedding of `model` again, on the CPU, from its transformers `config`:
    its inverse frequencies fp32, as transformers' own 16-bit models keep them (from_pretrained
    computes them in fp32 and never casts them). After a conversion to 16 bits, rounded, they
    would turn a position in the thousands by a wrong angle: cos and sin off by up to 0.46 (fp16)
    and 1.6 (bf16) at 4,093."""
    config = config.get_text_config()
    for name, module in list(model.named_modules()):
        if _is_rotary(module):
            model.set_submodule(name, type(module)(config))


def _is_rotary(module: torch.nn.Module) -> bool:
    return type(module).__name__.endswith("RotaryEmbedding")


def _rebuild_buffers(model: torch.nn.Module) -> None:
    """Build again each module whose buffers the meta device left without values.

    In these families that is the rotary embedding (its frequency tables are computed from the
    config, never stored in a checkpoint); anything else would be a family vkx does not know.
    """
    for name, module in model.named_modules():
        if any(b.is_meta for b in module.buffers(recurse=False)) and not _is_rotary(module):
            raise ExportError(f"{type(model).__name__}: {name} has buffers vkx cannot rebuild")
    fp32_rotary(model, model.config)


def map_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a safetensors file as a view of one private read-only mapping (no copy)."""
    try:
        with open(path, "rb") as f:
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
        header_len = int.from_bytes(mapped[:8], "little")
        header = json.loads(mapped[8:8 + header_len])
    except (OSError, ValueError) as error:
        raise ExportError(f"{path}: not a readable safetensors file ({error})") from error
    base = 8 + header_len
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = torch_dtype(dtypes.by_safetensors(info.get("dtype")))
        except ValueError:
            raise ExportError(f"{path}: {name} has dtype {info.get('dtype')!r}, which vkx does not read") from None
        begin, end = info["data_offsets"]
        shape = tuple(info["shape"])
        count = (end - begin) // dtype.itemsize
        if base + end > len(mapped) or count != _numel(shape):
            raise ExportError(f"{path}: {name}'s bytes do not match its shape {list(shape)}")
        flat = (torch.frombuffer(mapped, dtype=dtype, count=count, offset=base + begin) if count
                else torch.empty(0, dtype=dtype))
        tensors[name] = flat.view(shape)
    return tensors


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def assign_weights(model: torch.nn.Module, files: tuple[Path, ...],
                   references: dict[tuple, Reference] | None = None) -> None:
    """Make the checkpoint's mapped tensors the model's parameters (tied weights tied again after);
    `references` gets the name and file of each (build_model)."""
    stored: dict[str, torch.Tensor] = {}
    for path in files:
        mapped = map_safetensors(path)
        stored.update(mapped)
        if references is not None:
            references.update({identity(t): Reference(name, str(path)) for name, t in mapped.items() if t.numel()})
    wanted = model.state_dict(keep_vars=True)
    tied = {name for name in wanted if name not in stored and _is_tied(model, name)}
    missing = sorted(set(wanted) - set(stored) - tied)
    unexpected = sorted(set(stored) - set(wanted))
    if missing or unexpected:
        raise ExportError(f"{files[0].parent}: the checkpoint does not match the config: "
                          f"missing {_names(missing)}, unexpected {_names(unexpected)}")
    for name, tensor in stored.items():
        if tuple(tensor.shape) != tuple(wanted[name].shape):
            raise ExportError(f"{files[0].parent}: {name} has shape {list(tensor.shape)}, "
                              f"the config wants {list(wanted[name].shape)}")
    model.load_state_dict(stored, strict=False, assign=True)
    model.tie_weights()
    for param in model.parameters():
        param.requires_grad_(False)


def _is_tied(model: torch.nn.Module, name: str) -> bool:
    return name == "lm_head.weight" and bool(getattr(model.config.get_text_config(), "tie_word_embeddings", False))


def _names(names: list[str], shown: int = 3) -> str:
    if not names:
        return "none"
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


class CausalLM(torch.nn.Module):
    """A causal LM with its KV cache as buffers: `forward(input_ids, cache_position) -> logits`
    of the last of the n positions, `[1, 1, vocab]` (the language-model head runs on that row
    only: a prefill of n tokens does not compute n × vocab logits that nobody reads); `score`,
    the same call's logits of all n positions. Logits are fp32 (`fp32_head`).

    Each layer's keys and values are buffers `[1, kv_heads, max_seq_len, head_dim]` in the
    dtype the model computes in, written at `cache_position` with `index_copy_`. The mask is built here from
    `cache_position` (a query at position p sees cache slots 0..p), so slots past the current
    position (never written, or written by a padded prefill) are never read.
    """

    def __init__(self, model: torch.nn.Module, max_seq_len: int):
        super().__init__()
        config = model.config.get_text_config()
        heads = config.num_attention_heads
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        dtype = next(model.parameters()).dtype
        # The model's children are this module's own, so its tensors keep the checkpoint's names
        # (model.layers.0..., lm_head.weight) whether the file stores them or references them.
        for name, child in model.named_children():
            self.add_module(name, child)
        object.__setattr__(self, "_causal_lm", model)  # not registered: `_model` rebuilds it
        head = model.get_output_embeddings()
        self.head_name = next(name for name, m in self.named_modules() if m is head)
        """The output projection's module name (quantize_module's `head_name`)."""
        self.max_seq_len = max_seq_len
        layers = [_PositionedLayer(max_seq_len) for _ in range(config.num_hidden_layers)]
        for i, layer in enumerate(layers):
            self.register_buffer(f"key_cache_{i}", torch.zeros(1, kv_heads, max_seq_len, head_dim, dtype=dtype),
                                 persistent=False)
            self.register_buffer(f"value_cache_{i}", torch.zeros(1, kv_heads, max_seq_len, head_dim, dtype=dtype),
                                 persistent=False)
        self._layers = layers
        self._cache = Cache(layers=layers)
        # transformers renamed forward's cache argument (past_key_values up to 5.17, cache in 5.24);
        # a name the model does not take would be swallowed by its **kwargs and the cache ignored.
        taken = inspect.signature(model.forward).parameters
        self._cache_argument = "cache" if "cache" in taken else "past_key_values"
        self.register_buffer("_slots", torch.arange(max_seq_len), persistent=False)

    def forward(self, input_ids: torch.Tensor, cache_position: torch.Tensor) -> torch.Tensor:
        """fp32 logits of the last position, [1, 1, vocab]."""
        return self._logits(input_ids, cache_position, last_only=True)

    def score(self, input_ids: torch.Tensor, cache_position: torch.Tensor) -> torch.Tensor:
        """fp32 logits of every position, [1, n, vocab] (a perplexity's window)."""
        return self._logits(input_ids, cache_position, last_only=False)

    def _logits(self, input_ids: torch.Tensor, cache_position: torch.Tensor, last_only: bool) -> torch.Tensor:
        for i, layer in enumerate(self._layers):
            # The buffers are read here, on every call, so that torch.export sees the module's own
            # (and their in-place updates become the program's state).
            layer.bind(getattr(self, f"key_cache_{i}"), getattr(self, f"value_cache_{i}"), cache_position)
        visible = self._slots[None, :] <= cache_position[:, None]
        model = self._model()
        with _grouped_sdpa():
            hidden = model.base_model(input_ids=input_ids, position_ids=cache_position[None, :],
                                      attention_mask=visible[None, None], use_cache=True,
                                      **{self._cache_argument: self._cache}).last_hidden_state
        return fp32_head(model.get_output_embeddings(), hidden[:, -1:] if last_only else hidden)

    @property
    def config(self):
        """The wrapped model's transformers config."""
        return self._causal_lm.config

    def _model(self) -> torch.nn.Module:
        """The wrapped model over this module's own children: a converted or quantized copy of this
        module (export's module-tree copies) replaces those, never the unregistered original."""
        model = copy.copy(self._causal_lm)
        model._modules = {name: self._modules[name] for name in model._modules}
        return model

    def repeated(self) -> Repeated:
        """The decoder layers, each with its own key and value cache (export stamps them: vkx.export.stamp)."""
        layers = next(name for name, m in self.named_modules()
                      if isinstance(m, torch.nn.ModuleList) and len(m) == len(self._layers))
        return Repeated(layers, lambda i: (f"key_cache_{i}", f"value_cache_{i}"))

    def reset(self) -> None:
        """Zero the cache (a new sequence)."""
        for name, buffer in self.named_buffers():
            if "_cache_" in name:
                buffer.zero_()


def fp32_head(head: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """The language-model head's logits in fp32 whatever the model's dtype (its weight read as stored):
    16-bit logits are too coarse to rank the top tokens (bf16 tied "The" and "L" where fp32 leads by
    0.08). A quantized head takes fp32 activations and gives fp32; a float one is widened exactly, a
    cast the export reads through (vkx.export.operands.Operands.widened)."""
    if isinstance(head, torch.nn.Linear):
        bias = None if head.bias is None else head.bias.float()
        return torch.nn.functional.linear(hidden.float(), head.weight.float(), bias)
    return head(hidden.float())


@contextlib.contextmanager
def _grouped_sdpa():
    """transformers' sdpa attention with grouped key/value heads passed as they are (`enable_gqa`)
    where it would otherwise repeat them (`repeat_kv`: two copies of a layer's whole cache per call,
    with a mask), through its own switch; vkx's attention reads each group's heads in place."""
    before = os.environ.get(_FORCE_GQA)
    os.environ[_FORCE_GQA] = "1"
    try:
        yield
    finally:
        if before is None:
            del os.environ[_FORCE_GQA]
        else:
            os.environ[_FORCE_GQA] = before


_FORCE_GQA = "TRANSFORMERS_SDPA_FORCE_GQA"


class _PositionedLayer(StaticLayer):
    """A static cache layer written at the positions given with the call (not a running count)."""

    def bind(self, keys: torch.Tensor, values: torch.Tensor, position: torch.Tensor) -> None:
        self.keys, self.values, self.position = keys, values, position
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        self.keys.index_copy_(2, self.position, key_states)
        self.values.index_copy_(2, self.position, value_states)
        return self.keys, self.values
