"""Builders of the unary float functions of vkx.format.op_et.FUNCTIONS: each one GLSL expression of x
in shaders/unary.comp (elementwise.unary), fp32 math."""
from __future__ import annotations

from vkx.format import op_et
from vkx.format.contract import Call

from . import OpBuilder, builds
from .elementwise import unary

EXPRESSIONS: dict[str, str] = {
    "log10": "(log_(x) * 0.43429448190325176)",
    "tan": "(sin_(x) / cos_(x))",
}
"""GLSL of x (a float or a vec4) for each function; log_/sin_/cos_ are unary.comp's IEEE-edge-safe forms."""


@builds(*(f"aten.{name}.default" for name in op_et.FUNCTIONS))
def function(builder: OpBuilder, call: Call) -> None:
    unary(builder, call, EXPRESSIONS[call.decl.name.split(".")[1]])
