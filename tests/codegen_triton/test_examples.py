"""Every example of tests/kernel_examples/ through TritonTarget, in Triton's CPU interpreter.

Reduction examples run twice: with the default (persistent where the row fits) and forced looped with
a small RBLOCK (128), so rows span several loop iterations and partial last blocks."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")   # NumPy: NaN/inf inputs in the interpreter

import kernel_examples as ke
from fuse_all_ir import render_host_program

REDUCTION_EXAMPLES = [name for name, make in ke.EXAMPLES.items()
                      if any(k.reduction for k in make("cpu").program.kernels.values())]


def run_example(name: str, tmp_path, **target_options):
    from fuse_all_codegen_triton import TritonTarget
    from fuse_all_ir import load_host_program
    example = ke.EXAMPLES[name]("cpu")
    source = render_host_program(example.program, TritonTarget(**target_options))
    module = load_host_program(source, str(tmp_path))
    outputs = module.call(list(example.inputs))
    ke.assert_outputs_match(outputs, example.expected(example.inputs), example)
    return source


@pytest.mark.parametrize("name", list(ke.EXAMPLES))
def test_example(name, tmp_path):
    run_example(name, tmp_path)


@pytest.mark.parametrize("name", REDUCTION_EXAMPLES)
def test_example_looped(name, tmp_path):
    source = run_example(name, tmp_path, force_looped=True, rblock=128)
    assert "for roffset in range(0, rnumel, RBLOCK):" in source
