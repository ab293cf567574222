"""The models behind the ExecuTorch-made files here (its make_*.py scripts import them as top-level
modules; the tests as `tests.data.*`)."""
