"""A training graph loaded from torch's AOTAutograd cache in a new process (marker `cuda`): forward and
backward come from the cache, in reduce-overhead they share one CUDA-graph pool and replay after warm-up
as freshly compiled ones do, and every step still matches an eager copy (the loop of
test_cudagraphs_training.py, in two new processes with caches on).

    source bench/gpu_env.sh && python -m pytest tests/cuda/test_cached_training_cuda.py -m cuda -q"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.cuda

SCRIPT = r'''
import json, sys, torch, fuse_all
sys.path.insert(0, TESTS)
import training_loops as tl
torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
def stats():
    return [(g.kind, g.cudagraphs["stats"]) for g in fuse_all.compiled_graphs() if "stats" in g.cudagraphs]
compile_fn = lambda fn: torch.compile(fn, backend="fuse_all", options={"cudagraphs": True, "autotune": False})
log = tl.train_side_by_side("convnet", "fresh_batches", "sgd", compile_fn, stats, device="cuda",
                            steps=tl.WARMUP_STEPS + 4, atol=2e-4, rtol=2e-3)
tl.assert_graphs_replay_after_warmup(log)
print("@@" + json.dumps({"from_cache": {g.kind: g.from_cache for g in fuse_all.compiled_graphs()},
                         "stats": [(k, dict(s)) for k, s in stats()]}))
'''


def test_training_graphs_from_the_cache_replay_and_match_eager(tmp_path):
    tests = str(Path(__file__).resolve().parents[1])
    environ = {**os.environ, "FUSE_ALL_CACHE_DIR": str(tmp_path / "fa"),
               "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"), "TORCHINDUCTOR_AUTOGRAD_CACHE": "1",
               "FUSE_ALL_FORCE_DISABLE_CACHES": "0", "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "0"}
    environ.pop("TRITON_INTERPRET", None)
    results = []
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", f"TESTS = {tests!r}\n" + SCRIPT], capture_output=True,
                              text=True, timeout=600, env=environ)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("@@")]
        assert proc.returncode == 0 and lines, proc.stdout[-2000:] + proc.stderr[-4000:]
        results.append(json.loads(lines[-1][2:]))
    assert results[0]["from_cache"] == {"forward": False, "backward": False}, results
    assert results[1]["from_cache"] == {"forward": True, "backward": True}, results
    for result in results:
        kinds = {kind for kind, _ in result["stats"]}
        assert kinds >= {"forward", "backward"}, result
        assert all(s["plain_calls"] == 0 and s["replays"] >= 4 for _, s in result["stats"]), result
