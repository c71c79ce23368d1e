"""`CppChoices`: the C++ target's kernel shapes live in its choices object, and the renderer follows it."""
from __future__ import annotations

import torch

import kernel_examples as ke
from fuse_all_codegen_cpp import CppChoices, CppTarget
from fuse_all_ir.normalize import normalize
from fuse_all_ir import KernelShape, load_host_program, render_host_program


def shapes(example, choices=None) -> dict:
    program = example.program
    choices = choices or CppChoices()
    return {name: choices.choose_kernel_shape(normalize(k), program.size_hints).kind
            for name, k in program.kernels.items()}


def test_each_reduction_layout_gets_its_shape():
    assert shapes(ke.cos_sin("cpu")) == {"kernel_0": "pointwise"}
    assert shapes(ke.softmax("cpu")) == {"kernel_0": "rows"}
    assert shapes(ke.full_reduction("cpu")) == {"kernel_0": "split"}
    assert shapes(ke.column_reductions("cpu")) == {"kernel_0": "tiled", "kernel_1": "tiled"}
    kernels = ke.column_reductions("cpu").program.kernels
    # a softmax down 300 rows reads its tile in three phases: 64 columns keep one phase's rows in L2
    assert CppChoices().choose_kernel_shape(normalize(kernels["kernel_0"])).get("max_tile") == 64
    assert CppChoices().choose_kernel_shape(normalize(kernels["kernel_1"])).get("max_tile") == 1024


class RowsOnly(CppChoices):
    def choose_kernel_shape(self, kernel, size_hints=None) -> KernelShape:
        shape = super().choose_kernel_shape(kernel, size_hints)
        return KernelShape("rows") if shape.kind == "tiled" else shape


def test_a_choices_subclass_changes_the_rendered_kernel_and_it_stays_correct(tmp_path):
    torch.manual_seed(0)
    example = ke.column_reductions("cpu")
    default = CppTarget()
    rows = CppTarget(RowsOnly())
    assert "fa_tw = fa_tile_width(" in default.kernel_source(example.program.kernels["kernel_0"])
    source = render_host_program(example.program, rows)
    assert "fa_tw = fa_tile_width(" not in source
    outputs = load_host_program(source, str(tmp_path)).call(list(example.inputs))
    ke.assert_outputs_match(outputs, example.expected(example.inputs), example)


def test_a_smaller_tile_reaches_the_generated_code():
    class Narrow(CppChoices):
        max_tile = 64
    text = CppTarget(Narrow()).kernel_source(ke.column_reductions("cpu").program.kernels["kernel_0"])
    assert "fa_tw = fa_tile_width(" in text and ", 64);" in text and "[64]" in text
