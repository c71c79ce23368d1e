"""bench/profile_kernels.py --bandwidth: each generated kernel's device time comes from the profiler range of the
graph and kernel that launched it (two graphs' `kernel_3` are two rows), and its bytes from that graph's record."""
import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def profile_kernels():
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location("profile_kernels", BENCH / "profile_kernels.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(BENCH))


def test_kernels_of_two_graphs_with_one_name_are_two_rows_with_their_own_bytes(profile_kernels):
    from fuse_all.profiling import GraphCall, StepCall

    def call(*steps):
        return GraphCall(cpu_us=0.0, device_us=sum(us for _, us in steps),
                         steps=[StepCall(key, 0.0, us) for key, us in steps])
    calls = {"g_fwd": [call(("kernel_3", 10.0), ("extern_0", 50.0)), call(("kernel_3", 14.0), ("extern_0", 50.0))],
             "g_bwd": [call(("kernel_3", 40.0), ("kernel_3", 40.0)), call(("kernel_3", 40.0), ("kernel_3", 40.0))]}
    report = SimpleNamespace(groups=[{"kernel": "kernel_3", "why": "pointwise over (1024,)"}])
    records = [SimpleNamespace(graph_id="g_fwd", kind="forward", kernel_bytes={"kernel_3": 24_000_000}, report=report),
               SimpleNamespace(graph_id="g_bwd", kind="backward", kernel_bytes={"kernel_3": 8_000_000}, report=None)]
    rows = profile_kernels.bandwidth_rows(calls, records)
    assert [(r["graph"], r["kernel"]) for r in rows] == [("backward g_bwd", "kernel_3"), ("forward g_fwd", "kernel_3")]
    backward, forward = rows
    assert backward["ms_per_step"] == pytest.approx(0.08) and backward["us_per_launch"] == pytest.approx(40.0)
    assert backward["gbps"] == pytest.approx(200.0)          # 8 MB in 40 µs
    assert forward["us_per_launch"] == pytest.approx(12.0) and forward["gbps"] == pytest.approx(2000.0)
    assert forward["why"] == "pointwise over (1024,)" and backward["why"] == ""


def test_rows_name_the_config_their_launcher_chose_and_the_candidates_times(profile_kernels):
    """Two graphs' `kernel_3` launchers are told apart by their source hash; a launcher that benchmarked its
    candidates in this process lists each one's time, one whose choice came from the disk cache only the pick."""
    import hashlib

    from fuse_all_codegen_triton.runtime import TritonKernel

    def launcher(source, chosen, timings):
        kernel = object.__new__(TritonKernel)   # only the attributes the notes read
        kernel.name, kernel.spec = "kernel_3", {"source_hash": hashlib.sha256(source.encode()).hexdigest()[:32]}
        kernel.configs = [{"XBLOCK": 32, "RBLOCK": 64, "num_warps": 8}, {"XBLOCK": 64, "RBLOCK": 64, "num_warps": 4}]
        kernel.chosen, kernel.timings_ms = kernel.configs[chosen], timings
        return kernel
    alive = [launcher("fwd source", 1, [0.060, 0.031]), launcher("bwd source", 0, None)]
    records = [SimpleNamespace(graph_id="g_fwd", kind="forward", kernel_sources={"kernel_3": "fwd source"}),
               SimpleNamespace(graph_id="g_bwd", kind="backward", kernel_sources={"kernel_3": "bwd source"})]
    rows = [{"graph": "forward g_fwd", "kernel": "kernel_3"}, {"graph": "backward g_bwd", "kernel": "kernel_3"},
            {"graph": "backward g_bwd", "kernel": "kernel_never_launched"}]   # (kernel_9 of an earlier test
    # in the same process can still be alive: live launchers are found by name)
    profile_kernels.autotune_notes(rows, records)
    assert rows[0]["tuning"] == "chosen 64/64/4 (XBLOCK/RBLOCK/warps); candidates 32/64/8 60.0 us, 64/64/4 31.0 us"
    assert rows[1]["tuning"] == "chosen 32/64/8 (XBLOCK/RBLOCK/warps)"
    assert "tuning" not in rows[2] and len(alive) == 2


def test_kernel_kinds(profile_kernels):
    kind = profile_kernels.kind_of
    assert kind("kernel_3_part0") == kind("triton_red_fused_sum_0") == kind("tf32x3_matmul") == "generated"
    assert kind("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32") == "matmul"
    assert kind("sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc") == "convolution"
    assert kind("void at::native::vectorized_elementwise_kernel<4, FillFunctor>") == "other ATen"
    assert not profile_kernels.is_library_kernel("tf32x3_matmul")
