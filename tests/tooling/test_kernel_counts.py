"""bench/kernel_counts.py: fuse_all's and Inductor's kernels + ATen calls per graph."""
import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "kernel_counts.py"


@pytest.fixture(scope="module")
def kernel_counts():
    spec = importlib.util.spec_from_file_location("kernel_counts", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


INDUCTOR_CODE = '''
cpp_fused_add_0 = async_compile.cpp_pybinding(['float*'], r"""extern "C" void kernel() {}""")
triton_poi_fused_relu_1 = async_compile.triton('triton_poi_fused_relu_1', """...""", device_str='cuda')
async_compile.wait(globals())

def call(args):
    arg0_1, arg1_1 = args
    buf0 = empty_strided_cpu((8, 16), (16, 1), torch.float32)
    extern_kernels.mm(arg0_1, arg1_1, out=buf0)
    cpp_fused_add_0(buf0)
    triton_poi_fused_relu_1.run(buf0, 128, stream=stream0)
    buf1 = torch.ops.aten.convolution_backward.default(buf0, arg0_1, arg1_1, [16], [1], [0], [1], False, [0], 1, [True, True, False])
    return (reinterpret_tensor(buf0, (16, 8), (1, 16), 0), )


def benchmark_compiled_module(args, times=10, repeat=10):
    fn = lambda: call(list(args))
'''


def test_inductor_code_is_counted_kernels_and_aten_calls(kernel_counts):
    counts = kernel_counts.count_inductor(INDUCTOR_CODE)
    assert counts["kernels"] == 2 and counts["launches"] == 2
    assert counts["externs"] == ["extern_kernels.mm", "torch.ops.aten.convolution_backward.default"]


def test_a_row_pairs_our_graph_with_inductors(kernel_counts):
    ours, theirs = kernel_counts.measure_row("pw_cos_sin_1e4", "cpu")
    assert len(ours) == len(theirs) == 1
    assert ours[0]["kind"] == "inference" and ours[0]["kernels"] == 1 and ours[0]["externs"] == []
    assert theirs[0]["launches"] == 1 and theirs[0]["externs"] == []
