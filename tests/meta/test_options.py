"""The backend's registration and its `mode` / `options` checking."""
import pytest
import torch

import fuse_all
from fuse_all.options import OptionError, parse


def test_registered_through_the_entry_point():
    assert "fuse_all" in torch.compiler.list_backends()


@pytest.mark.parametrize("mode,options,needle", [
    ("turbo", None, "unknown mode 'turbo'; valid modes: None, 'default', 'reduce-overhead'"),
    (None, {"speed": 1}, "unknown option 'speed'; valid options: autotune, codegen, cudagraphs, debug, fallback"),
    (None, {"codegen": "cuda"}, "option 'codegen' must be one of auto, cpp, triton"),
    (None, {"debug": "yes"}, "option 'debug' takes a bool"),
])
def test_bad_mode_or_option_names_the_valid_ones(mode, options, needle):
    with pytest.raises(OptionError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        parse(mode, options)


def test_bad_option_through_torch_compile_is_a_clear_error():
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: x + 1, backend="fuse_all", options={"speed": 1})
    with pytest.raises(Exception, match="unknown option 'speed'"):
        compiled(torch.randn(3))


def test_modes_set_cudagraphs():
    assert parse("reduce-overhead").cudagraphs and parse("max-autotune").cudagraphs
    assert not parse(None).cudagraphs and not parse("max-autotune-no-cudagraphs").cudagraphs


def test_reduce_overhead_on_cpu_runs_plainly_and_says_why():
    torch._dynamo.reset()
    fuse_all.reset()
    compiled = torch.compile(lambda x: torch.sin(x) * 2, backend="fuse_all", mode="reduce-overhead")
    x = torch.randn(17)
    torch.testing.assert_close(compiled(x), torch.sin(x) * 2)
    record = fuse_all.compiled_graphs()[-1]
    assert record.fallback_reason is None and len(record.kernels) == 1
    assert record.cudagraphs["enabled"] and "CUDA graphs need CUDA tensors" in record.cudagraphs["decisions"][0]


def test_unsupported_dtype_falls_back_to_aten_with_a_reason():
    torch._dynamo.reset()
    fuse_all.reset()
    fn = lambda z: (z * z).abs()  # noqa: E731 - complex: no fused codegen, must still run
    z = torch.randn(5, dtype=torch.complex64)
    torch.testing.assert_close(torch.compile(fn, backend="fuse_all")(z), fn(z))
