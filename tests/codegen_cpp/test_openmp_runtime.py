"""The generated C++ runs on torch's OpenMP runtime, not a second one (issue 17).

Two runtimes in one process would each keep their own thread pool, and one pool's threads would spin while
the other's work whenever eager ATen calls and fuse_all kernels alternate. The libraries link `-fopenmp`
(libgomp, SONAME libgomp.so.1); the dynamic loader hands them the libgomp torch already loaded (its bundled
copy in pip wheels), so after our kernels ran the process maps the same single runtime as before.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs /proc/self/maps (Linux)")

CHILD = r"""
import ctypes, json, os, re, torch, fuse_all

RUNTIME = re.compile(r"/lib(gomp|omp|iomp5)[^/]*\.so[^/]*$")

def mapped():
    paths = {line.split()[-1] for line in open("/proc/self/maps") if len(line.split()) >= 6}
    return sorted(paths)

before = [p for p in mapped() if RUNTIME.search(p)]
fn = torch.compile(lambda x: (x.cos() * 2).sin() + x, backend="fuse_all", options={"fallback": False})
x = torch.randn(1 << 18)
torch.testing.assert_close(fn(x), (x.cos() * 2).sin() + x)
(record,) = fuse_all.compiled_graphs()
sources = "\n".join(record.kernel_sources.values())
after = mapped()
ours = [p for p in after if p.startswith(os.environ["FUSE_ALL_CACHE_DIR"]) and p.endswith(".so")]

def entry(path):   # where the library's GOMP_parallel calls land (a static copy: its own); None: it makes none
    try:
        return ctypes.cast(ctypes.CDLL(path).GOMP_parallel, ctypes.c_void_p).value
    except AttributeError:
        return None

print("@@" + json.dumps({"before": before, "after": [p for p in after if RUNTIME.search(p)],
                         "parallel": "#pragma omp parallel" in sources, "ours": ours,
                         "entries": [entry(p) for p in ours],
                         "torch_entry": entry(before[0]) if len(before) == 1 else None}))
"""


def test_generated_kernels_share_torchs_openmp_runtime(tmp_path):
    env = {**os.environ, "FUSE_ALL_CACHE_DIR": str(tmp_path), "OMP_NUM_THREADS": "2"}
    proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, timeout=600)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("@@")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    seen = json.loads(lines[-1][2:])
    assert seen["parallel"], "the kernel has no OpenMP region: the test would prove nothing"
    assert seen["ours"], seen       # our library is loaded in the process
    assert len(seen["before"]) == 1, f"torch loaded {seen['before']}"
    assert seen["after"] == seen["before"], f"a second OpenMP runtime came with the kernels: {seen['after']}"
    kernels = [e for e in seen["entries"] if e is not None]
    assert kernels and all(e == seen["torch_entry"] for e in kernels), f"a library has its own OpenMP runtime: {seen}"
