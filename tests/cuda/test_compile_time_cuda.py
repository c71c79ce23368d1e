"""Issue 12 on the GPU (marker `cuda`): Triton compiles in worker processes, kernels compiled once per
distinct code, and the warm start through torch's AOTAutograd cache, each in new processes with fresh
cache folders. Correctness is judged against float64; the timings are printed (`-s`), not asserted
(targets are for bench/bench.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.cuda

SCRIPT = r'''
import copy, json, sys, time
import torch, torchvision
import fuse_all
from fuse_all_codegen_triton import compiler
from torch._dynamo.utils import counters

# cuDNN convolutions default to TF32 on this GPU (about 1e-3 off a float64 reference): the comparison
# with CPU eager's float32 error needs full float32 on both sides
torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
torch.manual_seed(0)
model = torchvision.models.resnet18(weights=None).eval()
for m in model.modules():      # batch norms that are not the identity
    if isinstance(m, torch.nn.BatchNorm2d):
        m.running_mean.uniform_(-0.5, 0.5); m.running_var.uniform_(0.5, 1.5)
        m.weight.data.uniform_(0.5, 1.5); m.bias.data.uniform_(-0.5, 0.5)
x = torch.randn(2, 3, 64, 64)
with torch.no_grad():
    reference = copy.deepcopy(model).double()(x.double())
    eager = model(x).double()
    model, x = model.cuda(), x.cuda()
    start = time.perf_counter()
    compiled = torch.compile(model, backend="fuse_all", mode=sys.argv[1] if sys.argv[1] != "default" else None)
    got = compiled(x).clone()
    torch.cuda.synchronize()
    first_s = time.perf_counter() - start
    for _ in range(3):        # replays under reduce-overhead
        again = compiled(x)
    torch.testing.assert_close(again, got, rtol=1e-5, atol=1e-5)
records = fuse_all.compiled_graphs()
launchers = []
for r in records:
    if r.output_code:
        source = open(r.output_code).read()
        launchers.append((source.count("_launcher = TritonKernel("), source.count("same code as")))
workers = compiler._WORKERS
print("@@" + json.dumps({
    "first_s": first_s, "hits": counters["aot_autograd"]["autograd_cache_hit"],
    "error": (got.double().cpu() - reference).abs().max().item(),
    "eager_error": (eager - reference).abs().max().item(),
    "from_cache": [r.from_cache for r in records], "fallbacks": [r.fallback_reason for r in records],
    "launchers": launchers, "workers": len(workers._workers) if workers else 0,
    "broken": workers.broken if workers else None}))
'''


def _run(tmp_path: Path, mode: str, folder: str, compile_mode: str = "default") -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    root = tmp_path / folder
    env.update(FUSE_ALL_COMPILE_WORKERS=mode, FUSE_ALL_CACHE_DIR=str(root / "fa"),
               TRITON_CACHE_DIR=str(root / "triton"), TORCHINDUCTOR_CACHE_DIR=str(root / "inductor"),
               TORCHINDUCTOR_AUTOGRAD_CACHE="1")
    proc = subprocess.run([sys.executable, "-c", SCRIPT, compile_mode], env=env, capture_output=True, text=True, timeout=600)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("@@")]
    assert proc.returncode == 0 and lines, proc.stderr[-4000:]
    result = json.loads(lines[-1][2:])
    print(f"{mode} {folder}: first call {result['first_s']:.2f} s, {result}")
    return result


def _correct(result: dict) -> None:
    assert all(reason is None for reason in result["fallbacks"]), result["fallbacks"]
    assert result["error"] <= max(10 * result["eager_error"], 1e-4), result


@pytest.mark.parametrize("mode", ["processes", "threads"])
def test_cold_then_warm_resnet18(tmp_path, mode):
    cold = _run(tmp_path, mode, "caches")
    _correct(cold)
    assert cold["from_cache"] == [False] and cold["hits"] == 0
    (launchers, shared), = cold["launchers"]
    assert shared > 0 and launchers > shared      # repeated blocks share their kernels' compiles
    if mode == "processes":
        assert cold["workers"] >= 1 and cold["broken"] is None
    else:
        assert cold["workers"] == 0
    warm = _run(tmp_path, mode, "caches")         # a new process on the same cache folders
    _correct(warm)
    assert warm["hits"] == 1 and warm["from_cache"] == [True]


def test_warm_start_under_reduce_overhead(tmp_path):
    cold = _run(tmp_path, "processes", "caches", "reduce-overhead")
    warm = _run(tmp_path, "processes", "caches", "reduce-overhead")
    _correct(cold)
    _correct(warm)
    assert warm["hits"] == 1 and warm["from_cache"] == [True]
