"""Fake torch.nn (tests/bench/fake_torch/torch)."""
from . import functional  # noqa: F401
