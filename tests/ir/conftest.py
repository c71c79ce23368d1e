"""Unit tests of the IR stage on small graphs: lowering, fusion legality, scheduling, the report, and the
Program validator. Graphs are traced with `make_fx` (ATen ops, no Dynamo) and lowered on the CPU."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]   # ir_testing.py, kernel_examples/


@pytest.fixture
def nonzero():
    gen = torch.Generator().manual_seed(0)

    def make(*size):
        t = torch.randn(*size, generator=gen)
        return t + t.sign() * 0.1   # keep away from zero
    return make
