"""The rule table: how each traced op becomes contract ops, assembled from the modules that
write rules: ops.py (ATen ops), state.py (state updates and what cache masks are built from),
quantize.py (vkx's quantized ops) and torchao_import.py (torchao-quantized weights, whose rules
wrap those of the ops they replace)."""
from __future__ import annotations

from typing import Any

from vkx.export.ops import OP_RULES, Rule
from vkx.export.quantize import QUANT_RULES
from vkx.export.state import STATE_RULES
from vkx.export.torchao_import import with_torchao

RULES: dict[Any, Rule] = with_torchao({**OP_RULES, **STATE_RULES, **QUANT_RULES})
