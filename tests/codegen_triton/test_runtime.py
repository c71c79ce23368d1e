"""The launch machinery without a GPU: the generated fast launcher (with a fake Triton launcher), the
general path's routing, benchmark safety for in-place kernels, the autotune cache, heuristic mode."""
from __future__ import annotations

import json
import logging
import os
import stat

import pytest
import torch

import kernel_examples as ke
from fuse_all_ir import load_host_program, render_host_program


class FakeTensor:
    def __init__(self, ptr):
        self.ptr = ptr

    def data_ptr(self):
        return self.ptr


def cos_sin_kernel(tmp_path):
    from fuse_all_codegen_triton import TritonTarget
    example = ke.cos_sin("cpu")
    module = load_host_program(render_host_program(example.program, TritonTarget()), str(tmp_path))
    return module.kernel_0_launcher


@pytest.fixture
def fake_gpu(monkeypatch):
    """Pretend the compiled variant exists and is loaded: record what would be launched."""
    from fuse_all_codegen_triton import _triton_compat as compat
    calls = {"runner": [], "launch": [], "general": []}
    monkeypatch.setattr(compat, "stream_getter", lambda: (lambda idx: 1234))
    monkeypatch.setattr(compat, "current_device_getter", lambda: (lambda: 0))
    monkeypatch.setattr(compat, "launch_hooks", lambda: (None, None))
    monkeypatch.setattr(compat, "direct_launch", lambda runner: None)
    return calls


def prepare(kernel, calls, first_args, direct=None, monkeypatch=None):
    from fuse_all_codegen_triton.compiler import Compiled, VariantKey
    kernel.interpret, kernel.device_index, kernel.chosen = False, 0, kernel.configs[0]
    runner = lambda *a: calls["runner"].append(a)   # noqa: E731
    for div16 in (False, True):
        kernel._compiled[VariantKey(0, False, True, div16)] = Compiled(None, runner, "FUNC", "META")
    kernel._run_general = lambda *a: calls["general"].append(a)
    return kernel._make_fast_launcher(0, first_args)[0]     # (run, run_on): `run`


def test_fast_launcher_calls_the_runner_directly(tmp_path, fake_gpu):
    kernel = cos_sin_kernel(tmp_path)
    run = prepare(kernel, fake_gpu, (FakeTensor(4096), FakeTensor(8192), 10_000))
    run(FakeTensor(4096), FakeTensor(8192), 10_000)
    assert fake_gpu["runner"] == [(10, 1, 1, 1234, "FUNC", "META", None, None, None, 4096, 8192, 10_000, 1024)]
    assert "data_ptr()" in kernel.launcher_source and "(s0) & 15" in kernel.launcher_source
    run(FakeTensor(4096), FakeTensor(8192), 0)                 # empty: nothing launched
    assert len(fake_gpu["runner"]) == 1 and not fake_gpu["general"]


def test_run_on_launches_on_the_given_stream_without_a_device_lookup(tmp_path, fake_gpu, monkeypatch):
    from fuse_all_codegen_triton import _triton_compat as compat
    kernel = cos_sin_kernel(tmp_path)
    prepare(kernel, fake_gpu, (FakeTensor(4096), FakeTensor(8192), 10_000))
    monkeypatch.setattr(compat, "current_device_getter", lambda: (lambda: 5))   # another device is current
    run, run_on = kernel._make_fast_launcher(0, (FakeTensor(4096), FakeTensor(8192), 10_000))
    run(FakeTensor(4096), FakeTensor(8192), 10_000)                # `run` checks: the general path
    assert len(fake_gpu["general"]) == 1 and not fake_gpu["runner"]
    run_on(777, FakeTensor(4096), FakeTensor(8192), 10_000)        # the host program checked once per call
    assert fake_gpu["runner"] == [(10, 1, 1, 777, "FUNC", "META", None, None, None, 4096, 8192, 10_000, 1024)]
    run_source = kernel.launcher_source.split("def run_on")[1]
    assert "get_device" not in run_source and "get_stream" not in run_source
    run_on(777, FakeTensor(4100), FakeTensor(8192), 10_000)        # unaligned: still the general path
    assert len(fake_gpu["general"]) == 2 and fake_gpu["general"][1][0].ptr == 4100


def test_run_on_costs_one_frame_a_data_ptr_per_tensor_and_the_launch(tmp_path, fake_gpu):
    """The Python work of one launch, counted with cProfile: `run_on` itself, `data_ptr()` per tensor
    and the C launch; `run` adds the device and stream lookups."""
    import cProfile
    import pstats
    kernel = cos_sin_kernel(tmp_path)
    prepare(kernel, fake_gpu, (FakeTensor(4096), FakeTensor(8192), 10_000))
    run, run_on = kernel._make_fast_launcher(0, (FakeTensor(4096), FakeTensor(8192), 10_000))
    x, out = torch.empty(16), torch.empty(16)       # real tensors: data_ptr() is a C call

    def calls(fn, *args) -> int:
        profile = cProfile.Profile()
        profile.enable()
        fn(*args)
        profile.disable()
        return sum(s[1] for s in pstats.Stats(profile).stats.values()) - 1   # minus profile.disable()
    launches = len(fake_gpu["runner"])
    # the fake runner is a Python lambda that appends: 2 calls for the launch
    assert calls(run_on, 5, x, out, 10_000) == 1 + 2 + 2
    assert calls(run, x, out, 10_000) == 1 + 2 + 2 + 2
    assert len(fake_gpu["runner"]) == launches + 2


@pytest.mark.parametrize("args", [
    (FakeTensor(4100), FakeTensor(8192), 10_000),            # unaligned view
    (FakeTensor(4096), FakeTensor(8192), 10_001),            # size not a multiple of 16 (variant assumed it)
    (FakeTensor(4096), FakeTensor(8192), 2**31 + 16),        # needs int64 indexing
])
def test_fast_launcher_hands_unusual_calls_to_the_general_path(tmp_path, fake_gpu, args):
    run = prepare(cos_sin_kernel(tmp_path), fake_gpu, (FakeTensor(4096), FakeTensor(8192), 10_000))
    run(*args)
    assert fake_gpu["general"] == [args] and not fake_gpu["runner"]


def test_fast_launcher_direct_launch(tmp_path, fake_gpu, monkeypatch):
    from fuse_all_codegen_triton import _triton_compat as compat
    launched = []
    monkeypatch.setattr(compat, "direct_launch", lambda runner: (lambda *a: launched.append(a),
                                                                  (False, False, None, None)))
    run = prepare(cos_sin_kernel(tmp_path), fake_gpu, (FakeTensor(0), FakeTensor(512), 10_000))
    run(FakeTensor(0), FakeTensor(512), 10_000)
    assert launched == [(10, 1, 1, 1234, "FUNC", False, False, None, None, "META", None, None, None,
                         0, 512, 10_000, 1024)]


def test_fast_launcher_grid_of_a_transpose_tile(tmp_path, fake_gpu):
    """a.T + b over (s0, s1) in [YBLOCK, XBLOCK] tiles: one program per tile, both block sizes passed."""
    from fuse_all_codegen_triton import TritonTarget
    example = ke.broadcast_add_transposed("cpu")
    module = load_host_program(render_host_program(example.program, TritonTarget()), str(tmp_path))
    kernel = module.kernel_0_launcher
    config = kernel.configs[0]
    first = (FakeTensor(4096), FakeTensor(8192), FakeTensor(16384), 48, 80)
    run = prepare(kernel, fake_gpu, first)
    run(*first)
    tiles = -(-48 // config["YBLOCK"]) * -(-80 // config["XBLOCK"])
    assert fake_gpu["runner"] == [(tiles, 1, 1, 1234, "FUNC", "META", None, None, None, 4096, 8192, 16384, 48, 80,
                                   config["XBLOCK"], config["YBLOCK"])]


def test_interpreter_uses_the_heuristic_config_and_int64_twin(tmp_path):
    kernel = cos_sin_kernel(tmp_path)
    x = torch.randn(100)
    out = torch.empty(100)
    kernel.run(x, out, 100)
    assert kernel.chosen == kernel.configs[0] and not kernel._futures and not kernel.autotune
    torch.testing.assert_close(out, torch.sin(torch.cos(x)))
    assert kernel._int32_ok(100) and not kernel._int32_ok(2**31)
    assert kernel._fn_for(True) is kernel.fn_int64 and kernel._fn_for(False) is kernel.fn
    kernel.run(x[:0], out[:0], 0)                              # empty: no launch, no error


def test_benchmark_arguments_protect_in_place_outputs(tmp_path):
    from fuse_all_codegen_triton import TritonKernel
    spec = {"name": "k", "pointers": ["*fp32", "*fp32", "*fp32"], "sizes": [], "size_type": "i32",
            "xnumel": "64", "rnumel": None, "configs": [{"XBLOCK": 64, "num_warps": 1}], "n_inputs": 1,
            "mutated": [0], "source_hash": "x"}
    kernel = TritonKernel(lambda: None, spec, device="cpu")
    inp = torch.zeros(64)
    args = (inp, inp, torch.zeros(64))                         # output 0 is the input (in place)
    ptrs = kernel._bench_args(args)
    assert ptrs[0] == inp.data_ptr() and ptrs[2] == args[2].data_ptr()
    assert ptrs[1] != inp.data_ptr() and kernel._scratch       # redirected to scratch memory
    spec["mutated"] = []
    alias = torch.zeros(128)
    ptrs = kernel._bench_args((alias[:64], alias[64:], torch.zeros(64)))   # shares the input's storage
    assert ptrs[1] != alias[64:].data_ptr()


def test_autotune_cache_roundtrip(_private_cache):
    from fuse_all_codegen_triton import autotune
    key = autotune.cache_key("hash", [{"XBLOCK": 1}], autotune.size_bucket(1000, None), "H200", "3.6.0")
    assert autotune.load_choice(key) is None
    autotune.store_choice(key, {"XBLOCK": 1024, "num_warps": 4}, [0.1, 0.2])
    assert autotune.load_choice(key) == {"XBLOCK": 1024, "num_warps": 4}
    folder = os.path.join(autotune.cache_root(), "autotune")
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(autotune.cache_root()).st_mode) == 0o700
    # dynamic shapes share entries by power-of-two bucket; other devices / sources / versions do not
    assert autotune.size_bucket(1000, None) == autotune.size_bucket(1024, None) != autotune.size_bucket(1025, None)
    assert key != autotune.cache_key("hash", [{"XBLOCK": 1}], autotune.size_bucket(1000, None), "A100", "3.6.0")
    with open(os.path.join(folder, key + ".json"), "w") as f:
        f.write("{not json")
    assert autotune.load_choice(key) is None                   # a corrupt entry is a miss, not a crash
    with open(os.path.join(folder, key + ".json"), "w") as f:
        json.dump(["wrong shape"], f)
    assert autotune.load_choice(key) is None


def test_benchmark_picks_per_launch_times():
    from fuse_all_codegen_triton import autotune
    import time

    class Event:
        def record(self):
            self.t = time.perf_counter()

        def elapsed_time(self, other):
            return (other.t - self.t) * 1e3

    slow = lambda: time.sleep(0.002)   # noqa: E731
    fast = lambda: None                # noqa: E731
    times = autotune.benchmark([slow, fast], lambda: None, Event)
    assert len(times) == 2 and times[1] < times[0]


def test_wait_compiled_and_public_api(tmp_path):
    import fuse_all_codegen_triton as fa
    example = ke.two_kernels("cpu")
    module = load_host_program(render_host_program(example.program, fa.TritonTarget()), str(tmp_path))
    fa.wait_compiled(module)                                   # nothing to wait for in the interpreter
    assert set(fa.__all__) == {"__version__", "TritonTarget", "TritonChoices", "TritonKernel", "wait_compiled",
                               "unsupported_device"}
    assert all(getattr(fa, name) is not None for name in fa.__all__)      # every lazy name resolves
    assert fa.unsupported_device("cuda:0") is None
    from fuse_all_codegen_triton import _triton_compat
    assert (fa.unsupported_device("cpu") is None) == _triton_compat.interpret_mode()


def test_autotune_choice_is_benchmarked_and_remembered(_private_cache, monkeypatch, caplog):
    """Regression: `_choose_config` once reused the name of the tuning key for the variant keys, so
    storing the winner raised "can only concatenate tuple (not "str") to tuple" and every autotuned
    kernel (the reductions, on the GPU) fell back to triton's slow launcher. The candidates' times and the
    pick are one debug line (`TORCH_LOGS=+fuse_all`)."""
    import contextlib
    from fuse_all_codegen_triton import TritonKernel, autotune
    from fuse_all_codegen_triton.compiler import Compiled, VariantKey
    configs = [{"XBLOCK": 1024, "num_warps": 4}, {"XBLOCK": 2048, "num_warps": 8}]
    spec = {"name": "k", "pointers": ["*fp32", "*fp32"], "sizes": ["s0"], "size_type": "i32",
            "xnumel": "s0", "rnumel": None, "configs": configs, "n_inputs": 1, "mutated": [],
            "source_hash": "x"}
    kernel = TritonKernel(lambda: None, spec, device="cpu")
    kernel.autotune, kernel.device_index = True, 0
    kernel._submit = lambda key: None                          # every variant is "compiled" below
    for i in range(2):
        for aligned in (False, True):
            for div16 in (False, True):
                kernel._compiled[VariantKey(i, False, aligned, div16)] = Compiled(None, lambda *a: None, "F", "M")
    import types
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda idx=None: types.SimpleNamespace(
        name="FakeGPU", major=9, minor=0, multi_processor_count=132))
    monkeypatch.setattr(torch.cuda, "device", lambda idx: contextlib.nullcontext())
    from fuse_all_codegen_triton import _triton_compat as compat
    monkeypatch.setattr(compat, "stream_getter", lambda: (lambda idx: 1234))
    monkeypatch.setattr(autotune, "benchmark", lambda launchers, sync, event: [0.2, 0.1][: len(launchers)])
    args = (torch.zeros(4096), torch.zeros(4096), 4096)
    with caplog.at_level(logging.DEBUG, logger="fuse_all_codegen_triton"):
        assert kernel._choose_config(args) == 1 and kernel.timings_ms == [0.2, 0.1]
    assert "k autotuned for sizes (4096,): XBLOCK=1024,w4 200.0 us, XBLOCK=2048,w8 100.0 us <-" \
        in caplog.text
    assert autotune.load_choice(kernel._tuning_key([4096])) == configs[1]
    monkeypatch.setattr(autotune, "benchmark", lambda *a: pytest.fail("the stored choice is reused"))
    assert kernel._choose_config(args) == 1


def test_triton_kernel_cache_others_may_write_is_not_used(tmp_path, monkeypatch, caplog):
    """Triton loads compiled kernels from its cache folder: one others may write is swapped for a private
    folder under fuse-all's cache root before anything compiles."""
    from triton import knobs
    from fuse_all_codegen_triton import _triton_compat as compat
    monkeypatch.setenv("FUSE_ALL_CACHE_DIR", str(tmp_path / "fa"))
    shared = tmp_path / "shared-triton-cache"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setattr(knobs.cache, "dir", str(shared))
    used = compat.secure_cache_dir()
    assert used == knobs.cache.dir == str(tmp_path / "fa" / "triton" / "kernels")
    assert "not letting Triton load kernels from" in caplog.text
    shared.chmod(0o700)
    monkeypatch.setattr(knobs.cache, "dir", str(shared))
    assert compat.secure_cache_dir() == str(shared) == knobs.cache.dir     # a private one is kept
