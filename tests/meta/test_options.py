"""The backend's registration and its `mode` / `options` checking."""
import re

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
    (None, ["codegen"], "options must be a dict such as {'codegen': 'cpp'}, got list ['codegen']"),
    (None, "cpp", "options must be a dict"),
])
def test_bad_mode_or_option_names_the_valid_ones(mode, options, needle):
    with pytest.raises(OptionError, match=re.escape(needle)):
        parse(mode, options)


def test_bad_option_through_torch_compile_is_a_clear_error():
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: x + 1, backend="fuse_all", options={"speed": 1})
    with pytest.raises(Exception, match="unknown option 'speed'"):
        compiled(torch.randn(3))


def test_modes_set_cudagraphs():
    assert parse("reduce-overhead").cudagraphs and parse("max-autotune").cudagraphs
    assert not parse(None).cudagraphs and not parse("max-autotune-no-cudagraphs").cudagraphs


def test_max_autotune_modes_widen_the_config_space():
    assert parse("max-autotune").max_autotune and parse("max-autotune-no-cudagraphs").max_autotune
    assert not parse(None).max_autotune and not parse("reduce-overhead").max_autotune
    assert parse(None, {"max_autotune": True}).max_autotune


def test_reduce_overhead_on_cpu_runs_plainly_and_says_why():
    torch._dynamo.reset()
    fuse_all.reset()
    compiled = torch.compile(lambda x: torch.sin(x) * 2, backend="fuse_all", mode="reduce-overhead")
    x = torch.randn(17)
    torch.testing.assert_close(compiled(x), torch.sin(x) * 2)
    record = fuse_all.compiled_graphs()[-1]
    assert record.fallback_reason is None and len(record.kernels) == 1
    assert record.cudagraphs["enabled"] and "CUDA graphs need CUDA tensors" in record.cudagraphs["decisions"][0]


def test_options_not_a_dict_through_torch_compile_is_a_clear_error():
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: x + 1, backend="fuse_all", options=["codegen"])
    with pytest.raises(Exception, match="options must be a dict") as info:
        compiled(torch.randn(3))
    assert "dictionary update sequence" not in str(info.value)


def test_triton_on_cpu_without_the_interpreter_is_an_option_error_at_compile(monkeypatch):
    """Not a crash at the first call ("Found no NVIDIA driver"), and not hidden by the ATen fallback."""
    pytest.importorskip("triton")
    from fuse_all_codegen_triton import _triton_compat
    monkeypatch.setattr(_triton_compat, "interpret_mode", lambda: False)
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: x.sin() + 1, backend="fuse_all", options={"codegen": "triton"})
    with pytest.raises(Exception, match="codegen='triton' cannot run this graph on cpu.*TRITON_INTERPRET=1") as info:
        compiled(torch.randn(3))
    assert isinstance(info.value, OptionError) or isinstance(info.value.__cause__, OptionError) or \
        "OptionError" in str(info.value)
    torch._dynamo.reset()


def test_unsupported_dtype_runs_its_ops_in_aten_with_a_one_line_warning(caplog):
    """README: ops fuse-all lowers but cannot generate code for (complex here) run as ATen calls inside
    the compiled graph, with one warning line per graph; the record says which and why."""
    torch._dynamo.reset()
    fuse_all.reset()
    fn = lambda z: (z * z).abs()  # noqa: E731 - complex: no fused codegen, must still run
    z = torch.randn(5, dtype=torch.complex64)
    torch.testing.assert_close(torch.compile(fn, backend="fuse_all")(z), fn(z))
    record = fuse_all.compiled_graphs()[-1]
    assert record.fallback_reason is None and record.kernels == []
    assert [(e.target, e.reason) for e in record.externs] == [
        ("aten.mul.Tensor", "dtype torch.complex64 has no fused codegen"),
        ("aten.abs.default", "dtype torch.complex64 has no fused codegen")]
    lines = [r.getMessage() for r in caplog.records if "run as ATen calls" in r.getMessage()]
    assert len(lines) == 1 and "\n" not in lines[0]
    assert "2 ops run as ATen calls instead of fused kernels: aten.mul.Tensor (dtype torch.complex64" in lines[0]


def test_ops_without_a_lowering_run_in_aten_without_a_warning(caplog):
    torch._dynamo.reset()
    fuse_all.reset()
    fn = lambda a, b: torch.mm(a, b).relu()  # noqa: E731 - mm runs in ATen by design
    a, b = torch.randn(4, 5), torch.randn(5, 3)
    torch.testing.assert_close(torch.compile(fn, backend="fuse_all")(a, b), fn(a, b))
    record = fuse_all.compiled_graphs()[-1]
    assert [e.target for e in record.externs] == ["aten.mm.default"] and len(record.kernels) == 1
    assert "run as ATen calls" not in caplog.text
