"""Typed errors of `vkx export`."""
from __future__ import annotations

from vkx.format.errors import VkxError


class ExportError(VkxError):
    """The model file, the model or an option cannot be exported."""


class UnsupportedOpsError(ExportError):
    """The traced graph uses ops that the Vulkan op contract does not cover.

    `problems` holds one line per distinct op (and reason) with the user's source lines that use it.
    """

    def __init__(self, problems: list[str]):
        self.problems = problems
        self.details = tuple(problems)
        super().__init__(f"the model uses {len(problems)} op(s) vkx cannot lower:")
