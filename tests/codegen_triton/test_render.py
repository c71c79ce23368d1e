"""What the renderer writes: the readable kernel text users see, layouts, masks, index dtypes, CSE."""
from __future__ import annotations

import dataclasses

import sympy
import torch

import kernel_examples as ke
from fuse_all_ir import (Compute, Const, Kernel, Load, Loop, Origin, Reduce, Store, render_host_program,
                         rvar, size_symbol, xvar)
from fuse_all_ir.symbolic import FloorDiv, ModularIndexing

x0, x1, r0 = xvar(0), xvar(1), rvar(0)
s0 = size_symbol("s0")


def target(**options):
    from fuse_all_codegen_triton import TritonTarget
    return TritonTarget(**options)


def test_cos_sin_is_one_readable_kernel():
    example = ke.cos_sin("cpu")
    t = target()
    source = render_host_program(example.program, t)
    kernel = example.program.kernels["kernel_0"]
    text = t.kernel_source(kernel)
    assert text.startswith("@triton.jit\ndef kernel_0(in_ptr0, out_ptr0, s0, XBLOCK: tl.constexpr):")
    assert "tl.cos(" in text and "tl.sin(" in text
    assert text.count("tl.load(") == 1 and text.count("tl.store(") == 1
    assert "kernel_0_i64" not in text                     # the int64 twin is only in the module
    assert source.count("TritonKernel(") == 1 and text in source
    assert "    _fa_stream = None\n" in source                # CPU (the interpreter): no stream to read
    assert "    kernel_0_launcher.run_on(_fa_stream, arg0, buf0, s0)\n" in source


def test_a_cuda_program_reads_its_stream_once_per_call_and_checks_its_device():
    """Rendered (not run) for cuda:1: one current-device check and one stream read per call, then
    `run_on` per kernel; another current device takes the guarded path."""
    import dataclasses
    example = ke.cos_sin("cpu")
    program = dataclasses.replace(example.program, device="cuda:1")
    source = render_host_program(program, target())
    call = source[source.index("def call(args):"):source.index("def _call_profiled")]
    assert "if _fa_profiler._is_profiler_enabled or current_cuda_device() != 1:" in call
    assert call.count("_fa_stream = _fa_raw_stream(1)") == 1
    assert "kernel_0_launcher.run_on(_fa_stream, arg0, buf0, s0)" in call
    assert "empty_strided_cuda(" in call and "device=" not in call
    profiled = source[source.index("def _call_profiled"):]
    assert "with torch.cuda.device(1), _fa_range(" in profiled


def test_persistent_softmax_loads_once():
    text = target().kernel_source(ke.softmax("cpu").program.kernels["kernel_0"])
    assert "persistent reduction" in text and "for roffset" not in text
    assert text.count("tl.load(") == 1
    assert text.count("tl.exp(") == 1                     # exp(x - max) reused by the last phase
    assert "fa.max_nan(" in text and "tl.sum(" in text


def test_looped_softmax_has_one_loop_per_phase():
    text = target(force_looped=True, rblock=64).kernel_source(ke.softmax("cpu").program.kernels["kernel_0"])
    assert text.count("for roffset in range(0, rnumel, RBLOCK):") == 3
    assert text.count("tl.load(") == 3
    assert "_acc0 = tl.full([XBLOCK, RBLOCK], float(\"-inf\"), tl.float32)" in text


def test_int32_int64_choice():
    from fuse_all_codegen_triton.render import render_kernel
    small = Kernel("k", (sympy.Integer(1000),), (), [Loop(False, [Load("a", "in", x0, "float32"),
                                                                   Store("out", x0, "a")])], ("in",), ("out",), ())
    big = Kernel("k", (sympy.Integer(2**31 + 5),), (), small.loops, ("in",), ("out",), ())
    sym = Kernel("k", (s0,), (), small.loops, ("in",), ("out",), (s0,))
    r_small, r_big = render_kernel(small), render_kernel(big)
    assert "int32 indexing" in r_small.source and r_small.spec["int32_guard"] is None
    assert "tl.program_id(0).to(tl.int64)" in r_big.source and r_big.source_int64 is None
    r_sym = render_kernel(sym, hints={s0: 10_000})
    assert r_sym.spec["int32_guard"] == "s0 < 2146435072" and "def k_i64(" in r_sym.source_int64
    r_huge = render_kernel(sym, hints={s0: 2**32})       # the hint already needs int64: no twin, no guard
    assert r_huge.spec["size_type"] == "i64" and r_huge.source_int64 is None


def test_masks_follow_the_index_families():
    # out[x] = sum_r in[x, r] * w[r]: w is read with rmask only, the row value with xmask only
    k = Kernel("k", (sympy.Integer(7),), (sympy.Integer(300),), [
        Loop(True, [Load("a", "in", x0 * 300 + r0, "float32"), Load("w", "w", r0, "float32"),
                    Load("b", "bias", x0, "float32"),
                    Compute("p", "mul", ("a", "w"), "float32"), Compute("q", "add", ("p", "b"), "float32"),
                    Reduce("s", "sum", "q", "float32")]),
        Loop(False, [Store("out", x0, "s")]),
    ], ("in", "w", "bias"), ("out",), ())
    text = target().kernel_source(k)
    assert "tl.load(in_ptr0 + (r0 + 300*x0), xmask & rmask)" in text
    assert "tl.load(in_ptr1 + (r0), rmask)" in text
    assert "tl.load(in_ptr2 + (x0), xmask)" in text
    assert "tl.store(out_ptr0 + (x0), " in text


def test_scalar_store_of_a_row_value_broadcasts_the_pointer():
    text = target().kernel_source(ke.full_reduction("cpu").program.kernels["kernel_0"])
    assert "tl.store(out_ptr0 + (0 + tl.zeros([XBLOCK, 1], tl.int32)), " in text


def test_load_after_store_to_the_same_buffer_is_not_reused():
    k = Kernel("k", (sympy.Integer(64),), (), [Loop(False, [
        Load("a", "buf", x0, "float32"), Const("c", 2.0, "float32"), Compute("b", "mul", ("a", "c"), "float32"),
        Store("buf", x0, "b"), Load("a2", "buf", x0, "float32"), Store("out", x0, "a2"),
    ])], ("buf",), ("buf", "out"), ())
    text = target().kernel_source(k)
    assert text.count("tl.load(") == 2


def test_index_printer_and_origins():
    from fuse_all_codegen_triton.indexing import triton_index
    assert triton_index(FloorDiv(x0, 7) + 3 * ModularIndexing(x1, 4, 5)) in (
        "(x0 // 7) + 3*((x1 // 4) % 5)", "3*((x1 // 4) % 5) + (x0 // 7)")
    assert triton_index(ModularIndexing(x1, 1, 5)) == "(x1 % 5)"
    k = Kernel("k", (sympy.Integer(8),), (), [Loop(False, [Load("a", "in", x0, "float32"),
                                                            Compute("b", "cos", ("a",), "float32"),
                                                            Store("out", x0, "b")])],
               ("in",), ("out",), (), origins=(Origin("aten.cos.default", "/home/u/model.py", 3, "y = x.cos()"),))
    assert "# from aten.cos.default (model.py:3): y = x.cos()" in target().kernel_source(k)


def test_outer_dims_derived_from_xindex():
    kernel = ke.broadcast_add_transposed("cpu").program.kernels["kernel_0"]
    text = target().kernel_source(dataclasses.replace(kernel, tiling=None))   # as one flat block
    assert "x0 = xindex // s1" in text and "x1 = xindex % s1" in text


def test_transpose_plan_renders_a_2d_tile():
    """a.T + b (a column-major): a [YBLOCK, XBLOCK] tile, y down the dim `a` walks contiguously, x along
    the output's rows; one program per tile, the grid from both dims' sizes."""
    from fuse_all_codegen_triton.render import render_kernel
    kernel = ke.broadcast_add_transposed("cpu").program.kernels["kernel_0"]
    assert (kernel.tiling.kind, kernel.tiling.y_dim, kernel.tiling.x_dim) == ("transpose", 0, 1)
    rendered = render_kernel(kernel, hints={ke.s0: 37, ke.s1: 53})
    text = rendered.source
    assert "XBLOCK: tl.constexpr, YBLOCK: tl.constexpr" in text and "tile y=x0 x=x1" in text
    assert "yindex = ((pid // xtiles) % ytiles) * YBLOCK + tl.arange(0, YBLOCK)[:, None]" in text
    assert "xindex = (pid % xtiles) * XBLOCK + tl.arange(0, XBLOCK)[None, :]" in text
    assert "x0 = yindex" in text and "x1 = xindex" in text
    assert any(f"tl.load(in_ptr0 + ({index}), ymask & xmask)" in text    # contiguous down axis 0
               for index in ("x1*s0 + x0", "s0*x1 + x0", "x0 + s0*x1"))
    assert "tl.load(in_ptr1 + (x1), xmask)" in text                    # the broadcast row: x only
    from fuse_all_codegen_triton.configs import grid_source
    config = rendered.spec["configs"][0]
    grid = eval(f"lambda s0, s1: {grid_source(rendered.spec, config)}")   # noqa: S307
    assert grid(37, 53) == -(-37 // config["YBLOCK"]) * -(-53 // config["XBLOCK"])


def test_configs_small_and_big():
    from fuse_all_codegen_triton import configs
    assert len(configs.pointwise_configs(10_000)) == 1               # launch-bound: no autotuning
    assert len(configs.pointwise_configs(2**28)) >= 2
    softmax = configs.persistent_configs(16384, 4096, True)
    assert softmax[0]["RBLOCK"] == 4096 and softmax[0]["XBLOCK"] == 1 and len(softmax) >= 2
    column = configs.persistent_configs(45, 300, False)
    assert column and column[0]["XBLOCK"] * column[0]["RBLOCK"] <= 2 * configs.MAX_PERSISTENT_ELEMENTS
    assert configs.looped_configs(64, 100_000, True, rblock=16)[0]["RBLOCK"] == 16


def test_column_persistent_configs_spread_few_columns_over_programs():
    """A split BatchNorm's final combine (512 channels x 64 partials, train_resnet50): one 64-column tile
    per program left 8 programs on 132 SMs (13.4 us on the H200, Inductor 4.4 us); now 8-column tiles (one
    32-byte sector per row). Many columns keep the wide tiles."""
    from fuse_all_codegen_triton import configs
    for columns, rows in ((512, 64), (256, 128), (2048, 64), (45, 300), (8192, 64)):
        first = configs.persistent_configs(columns, rows, False)[0]
        programs = -(-columns // first["XBLOCK"])
        assert first["XBLOCK"] >= min(8, columns) and first["XBLOCK"] * first["RBLOCK"] <= 8192
        assert programs >= min(configs.MIN_PROGRAMS, -(-columns // 8)), (columns, rows, first)
    assert configs.persistent_configs(65536, 64, False)[0]["XBLOCK"] == 64     # enough programs: as before


def test_small_pointwise_kernels_get_latency_configs():
    """bert 1x12's pointwise kernels (12 x 768 and 12 x 3072 elements): about 128 programs of 256-1024
    elements (Inductor's untuned rule), one config (no autotuning); from 2**17 elements 1024 x 4 as before."""
    from fuse_all_codegen_triton import configs
    assert configs.pointwise_configs(12 * 768) == [{"XBLOCK": 256, "num_warps": 4, "num_stages": 1}]
    assert configs.pointwise_configs(12 * 3072) == [{"XBLOCK": 512, "num_warps": 4, "num_stages": 1}]
    assert configs.pointwise_configs(100) == [{"XBLOCK": 128, "num_warps": 4, "num_stages": 1}]
    assert configs.pointwise_configs(3) == [{"XBLOCK": 16, "num_warps": 1, "num_stages": 1}]
    assert configs.pointwise_configs(1 << 20) == [{"XBLOCK": 1024, "num_warps": 4, "num_stages": 1}]
    for n in (1, 17, 300, 5000, 40_000, 200_000, (1 << 21) - 1):
        (c,) = configs.pointwise_configs(n)
        programs = -(-n // c["XBLOCK"])
        assert c["XBLOCK"] >= min(n, 16) and (programs >= 64 or c["XBLOCK"] <= 256)   # spread over SMs
    assert configs.pointwise_configs(12 * 768, dynamic=True) == [{"XBLOCK": 1024, "num_warps": 4, "num_stages": 1}]
    x0 = xvar(0)
    static = Kernel("k", (sympy.Integer(12 * 768),), (), [Loop(False, [Load("a", "in", x0, "float32"),
                                                                       Compute("b", "cos", ("a",), "float32"),
                                                                       Store("out", x0, "b")])], ("in",), ("out",), ())
    assert target().render(static).spec["configs"] == [{"XBLOCK": 256, "num_warps": 4, "num_stages": 1}]
    dynamic = ke.cos_sin("cpu").program.kernels["kernel_0"]   # s0 elements, hinted 10_000
    assert target().render(dynamic, ke.cos_sin("cpu").program).spec["configs"][0]["XBLOCK"] == 1024
    ln = configs.persistent_configs(12, 768, True)          # bert 1x12's layer norm: one row per program
    # 12 programs for 132 SMs: latency-bound, the row spread over 8 warps (Inductor's RBLOCK // 128)
    assert ln == [{"XBLOCK": 1, "RBLOCK": 1024, "num_warps": 8, "num_stages": 1}]
    assert configs.persistent_configs(1024, 768, True) == [{"XBLOCK": 2, "RBLOCK": 1024, "num_warps": 4, "num_stages": 1}]   # enough programs: as before


def test_sum_of_bools_counts_and_max_of_bools_is_any(tmp_path):
    from fuse_all_ir import load_host_program
    k = Kernel("kernel_0", (sympy.Integer(5),), (sympy.Integer(37),), [
        Loop(True, [Load("q", "arg0", x0 * 37 + r0, "bool"), Reduce("n", "sum", "q", "int64"),
                    Reduce("m", "max", "q", "bool")]),
        Loop(False, [Store("buf0", x0, "n"), Store("buf1", x0, "m")]),
    ], ("arg0",), ("buf0", "buf1"), ())
    p = ke.program("bools", "cpu", {"arg0": ke.spec("bool", [5, 37])},
                   {"buf0": ke.spec("int64", [5]), "buf1": ke.spec("bool", [5])}, [k])
    q = torch.rand(5, 37) > 0.7
    q[2] = False
    for options in ({}, {"force_looped": True, "rblock": 8}):
        module = load_host_program(render_host_program(p, target(**options)), str(tmp_path))
        count, anyq = module.call([q])
        assert torch.equal(count, q.sum(1)) and torch.equal(anyq, q.any(1))


def test_floor_div_and_modulo_of_a_sum_are_parenthesised(tmp_path):
    """Regression (BERT 32x128 on the H200: "operation not supported on global/shared address space"):
    a view [4096, 3072] -> [32, 128, 3072] read back flat gives FloorDiv(3072*x0 + x1, 393216), which was
    printed ``3072*x0 + x1 // 393216`` (// binds tighter than +): an out-of-bounds load."""
    from fuse_all_codegen_triton.indexing import triton_index
    from fuse_all_ir import load_host_program
    assert triton_index(FloorDiv(48 * x0 + x1, 1536)) == "((48*x0 + x1) // 1536)"
    assert triton_index(ModularIndexing(48 * x0 + x1, 48, 32)) == "(((48*x0 + x1) // 48) % 32)"
    assert triton_index(ModularIndexing(2 * x0 + x1, 1, 5)) == "((2*x0 + x1) % 5)"
    # x viewed as [2, 32, 48] and read back as [64, 48]: the index must reduce to 48*x0 + x1
    flat = 48 * x0 + x1
    index = x1 + 1536 * FloorDiv(flat, 1536) + 48 * ModularIndexing(flat, 48, 32)
    k = Kernel("kernel_0", (sympy.Integer(64), sympy.Integer(48)), (), [Loop(False, [
        Load("a", "arg0", index, "float32"), Compute("b", "cos", ("a",), "float32"), Store("buf0", flat, "b")])],
        ("arg0",), ("buf0",), ())
    p = ke.program("view_flat", "cpu", {"arg0": ke.spec("float32", [64, 48])},
                   {"buf0": ke.spec("float32", [64, 48])}, [k])
    module = load_host_program(render_host_program(p, target()), str(tmp_path))
    x = ke.nonzero_randn(64, 48)
    (out,) = module.call([x])
    torch.testing.assert_close(out, torch.cos(x))


def test_configs_for_short_rows_and_huge_streams():
    """H200 measurements (bench/gpu_triton_regressions.py): layer norm over 768 wants a few rows per program
    and <= 8 warps; streams of 2**28 floats reach the copy ceiling with 4096-element blocks."""
    from fuse_all_codegen_triton import configs
    ln = configs.persistent_configs(4096, 768, True)
    assert ln[0]["XBLOCK"] > 1 and ln[0]["RBLOCK"] == 1024 and ln[0]["num_warps"] <= 8
    assert {"XBLOCK": 1, "RBLOCK": 1024, "num_warps": 4, "num_stages": 1} in ln and len(ln) <= 4
    assert all(c["XBLOCK"] * c["RBLOCK"] <= 2 * configs.MAX_PERSISTENT_ELEMENTS for c in ln)
    assert any(c["XBLOCK"] == 4096 for c in configs.pointwise_configs(2**28))
    assert len(configs.pointwise_configs(2**22)) == 2                # mid-sized: no extra compiles


def test_a_row_major_operand_of_a_multi_dim_kernel_is_addressed_by_xindex():
    """BatchNorm-apply over a channels-last (N*H*W, C) space: the per-channel operand keeps x1, the
    activation (row-major over the whole space) is `xindex` itself, not 512*(xindex // 512) + xindex % 512;
    an operand shifted by a row keeps the offset, a transposed one its own index."""
    x1 = xvar(1)
    k = Kernel("k", (sympy.Integer(6), sympy.Integer(512)), (), [Loop(False, [
        Load("a", "act", x0 * 512 + x1, "float32"), Load("m", "mean", x1, "float32"),
        Load("s", "act", x0 * 512 + x1 + 512, "float32"), Load("t", "other", x1 * 6 + x0, "float32"),
        Compute("d", "sub", ("a", "m"), "float32"), Compute("e", "add", ("d", "s"), "float32"),
        Compute("f", "add", ("e", "t"), "float32"), Store("out", x0 * 512 + x1, "f")])],
        ("act", "mean", "other"), ("out",), ())
    text = target().kernel_source(k)
    assert "tl.load(in_ptr0 + (xindex), xmask)" in text and "tl.store(out_ptr0 + (xindex), " in text
    assert "tl.load(in_ptr1 + (x1), xmask)" in text
    assert "tl.load(in_ptr0 + (xindex + (512)), xmask)" in text
    assert "tl.load(in_ptr2 + (x0 + 6*x1), xmask)" in text


def test_max_autotune_tries_smaller_programs_on_launch_bound_pointwise_kernels():
    """mode="max-autotune": a mid-size pointwise kernel (ResNet-50 1x224's BatchNorm + ReLU, 200704 elements)
    benchmarks the heuristic's pick against Inductor's two (1024 x 4 warps, 512 x 8) and smaller programs;
    the pick comes first (what runs without autotuning). Tiny and dynamic kernels keep their one config."""
    from fuse_all_codegen_triton import configs
    wide = configs.pointwise_configs(200704, max_autotune=True)
    assert wide[0] == configs.pointwise_configs(200704)[0] and len(wide) >= 4
    assert {"XBLOCK": 512, "num_warps": 8, "num_stages": 1} in wide
    assert all(c["XBLOCK"] < 200704 for c in wide[1:]) and len({str(c) for c in wide}) == len(wide)
    assert configs.pointwise_configs(300, max_autotune=True) == configs.pointwise_configs(300)
    assert len(configs.pointwise_configs(1 << 22, max_autotune=True)) > len(configs.pointwise_configs(1 << 22))


def test_the_max_autotune_option_reaches_the_triton_target():
    from fuse_all_codegen_triton.registration import TARGET
    from fuse_all.options import parse
    for mode, wide in ((None, False), ("max-autotune", True), ("max-autotune-no-cudagraphs", True)):
        opts = parse(mode)
        assert TARGET.create(opts, TARGET.choices(opts)).options.max_autotune is wide
