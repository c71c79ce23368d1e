"""Each distinct kernel compiles once (fuse_all_ir.kernel_sharing): kernels of a graph that differ only in
names share one compiled function; kernels that differ in anything else (a constant, a size, a dtype) do
not. Results are held to eager on random inputs by the op suite's `check`."""
import re

import pytest
import torch

import fuse_all
from fuse_all_optest import check

import fuse_all_ir as ir


def _blocks(scale_second: float):
    def fn(x, w1, b1, w2, b2, w3, b3):
        x = torch.relu((x @ w1) * 2 + b1)              # three epilogues separated by matmuls (ATen calls)
        x = torch.relu((x @ w2) * 2 + b2)
        # the last one feeds a matmul too: like the others it writes in place of its matmul's result (a
        # graph output would not, memory.py), so all three are the same code
        return torch.relu((x @ w3) * scale_second + b3) @ w3
    return fn


def _inputs(n=8, d=16):
    return [torch.randn(n, d)] + [t for _ in range(3) for t in (torch.randn(d, d) / 4, torch.randn(d))]


def _shared(record) -> dict[str, str]:
    source = open(record.output_code).read()
    return {line.split()[0].removesuffix("_launcher"): line.split("same code as ")[1].split(":")[0].strip()
            for line in source.splitlines() if "same code as" in line}


@pytest.mark.parametrize("codegen", ["cpp", pytest.param("triton", marks=pytest.mark.triton)])
def test_identical_epilogues_share_one_compiled_kernel(codegen, monkeypatch):
    monkeypatch.setenv("FUSE_ALL_SMALL_MATMUL_ROWS", "0")   # the matmuls stay ATen calls between the epilogues
    check(_blocks(2.0), *_inputs(), codegen=codegen)
    record = fuse_all.compiled_graphs()[-1]
    assert len(record.kernels) == 3
    shared = _shared(record)
    assert len(shared) == 2 and len(set(shared.values())) == 1, shared
    source = open(record.output_code).read()
    definitions = (len(re.findall(r'extern "C" void kernel_\d+\(', source)) if codegen == "cpp"
                   else source.count("\ndef kernel_"))
    assert definitions == 1


@pytest.mark.parametrize("codegen", ["cpp", pytest.param("triton", marks=pytest.mark.triton)])
def test_a_different_constant_or_size_is_not_shared(codegen):
    check(_blocks(3.0), *_inputs(), codegen=codegen)     # the third epilogue scales by 3, not 2
    shared = _shared(fuse_all.compiled_graphs()[-1])
    assert len(shared) == 1, shared

    def sizes(x, w1, b1, w2, b2):                        # same code, different sizes: two kernels
        x = torch.relu((x @ w1) * 2 + b1)
        return torch.relu((x @ w2) * 2 + b2)
    check(sizes, torch.randn(8, 16), torch.randn(16, 16), torch.randn(16), torch.randn(16, 32),
          torch.randn(32), codegen=codegen)
    assert _shared(fuse_all.compiled_graphs()[-1]) == {}


def test_normalization_keeps_what_matters():
    norm = ir.kernel_sharing.normalized
    a = "// from x\nvoid k1(float* buf1, float* arg2) { buf1[0] = arg2[0] * 2; }"
    b = "// from y\nvoid k7(float* buf9, float* arg3) { buf9[0] = arg3[0] * 2; }"
    swapped = "void k7(float* buf9, float* arg3) { arg3[0] = buf9[0] * 2; }"
    assert norm(a, "k1", ["buf1", "arg2"], "//") == norm(b, "k7", ["buf9", "arg3"], "//")
    assert norm(a, "k1", ["buf1", "arg2"], "//") != norm(swapped, "k7", ["buf9", "arg3"], "//")
    assert ir.kernel_sharing.representatives({"k1": "x", "k2": "y", "k3": "x"}) == {"k1": "k1", "k2": "k2",
                                                                                    "k3": "k1"}


def test_triton_kernels_sharing_a_function_share_its_compiles(monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    from fuse_all_codegen_triton import compiler

    calls = []
    monkeypatch.setattr(compiler, "compile_variant", lambda fn, spec, key, device: calls.append(key) or key)
    monkeypatch.setattr(compiler, "compile_pool", lambda: ThreadPoolExecutor(2))

    def fn():
        pass
    spec = {"configs": [{"XBLOCK": 64, "num_warps": 4}, {"XBLOCK": 128, "num_warps": 4}], "pointers": ["*fp32"],
            "size_type": "i32", "sizes": []}
    key = compiler.VariantKey(0, False, True)
    first, second = compiler.submit(fn, spec, key, 0), compiler.submit(fn, dict(spec), key, 0)
    assert first is second and first.result() == key
    assert compiler.submit(fn, spec, compiler.VariantKey(1, False, True), 0) is not first
    compiler.wait_all([first])
    assert len(calls) == 2
