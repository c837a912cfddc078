"""Fake triton (tests/bench/fake_torch): what bench/gemm_peers/peers.py uses."""
__version__ = "0.0+fake"
from . import testing  # noqa: E402,F401
