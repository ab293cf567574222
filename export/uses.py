"""Lowering's first pass: what each constant is used as.

`ConstantUses` runs every rule with nothing created: a constant read by an op that takes it
as stored (a rule's `tref` arguments: the op prepacks it itself) is a "tref" use, any other
read a "gpu" use, which `lower.Lowering` gives an `et_vk.prepack` of its own. A constant no
op reads is not written at all.
"""
from __future__ import annotations

from typing import Any, Mapping

from torch.export.graph_signature import OutputKind
from torch.fx import Node

from vkx.export.operands import Operands, Placeholders


class ConstantUses(Operands):
    """Records `uses`: constant node -> {"tref", "gpu"}; every value id it hands out is -1."""

    def __init__(self, program, placeholders: Placeholders):
        super().__init__(program, placeholders)
        self.uses: dict[Node, set[str]] = {}

    def tensor(self, value: Node, *, tref: bool = False) -> int:
        node = self.resolve(value)
        if node in self.constant_nodes:
            self.uses.setdefault(node, set()).add("tref" if tref else "gpu")
        return -1

    def no_value(self, *args: Any) -> int:
        """What this pass hands out for every value: none."""
        return -1

    constant = int = double = bool = string = null = int_list = double_list = value_list = no_value
    new_tensor = outputs = value_of = list_item = no_value

    def emit(self, name: str, args: list[int]) -> None:
        pass

    def bind(self, node: Node, value_id: int) -> None:
        pass

    def update(self, name: str, node: Node, args: list[int]) -> None:
        pass

    def state_of(self, value: Node) -> None:
        return None

    def read_outputs(self) -> None:
        """A model output that is a constant is copied out of its prepacked tensor."""
        output = next(node for node in self.program.graph.nodes if node.op == "output")
        for spec, item in zip(self.program.graph_signature.output_specs, output.args[0]):
            if spec.kind == OutputKind.USER_OUTPUT and isinstance(item, Node):
                self.tensor(item)


def constant_uses(program, placeholders: Placeholders, rules: Mapping[Any, Any]) -> dict[Node, set[str]]:
    """Each constant node that some op reads -> what it is used as ("tref", "gpu")."""
    uses = ConstantUses(program, placeholders)
    uses.run(rules)
    uses.read_outputs()
    return uses.uses
