"""A sample file with compiled functions, and records for it.

`compile_sample` runs the file with the real fuse_all backend (FUSE_ALL_ARTIFACT_DIR pointing at
a temp folder); a failing compile fails the tests. `write_fixture_records` builds schema-valid records
by hand for the cases a small real compile can't produce (graph breaks, CUDA-graph fallbacks, stale
records).

Run as a script to prepare a workspace by hand: `python tests/lsp/sample_project.py DIR`.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

SAMPLE_SOURCE = """\
import torch


@torch.compile(backend="fuse_all")
def pointwise(x):
    a = torch.cos(x)
    b = torch.sin(a)
    return a * b + 1.0


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        h = self.fc(x)
        return torch.relu(h).sum(dim=-1)


if __name__ == "__main__":
    torch.manual_seed(0)
    for _ in range(4):
        print(pointwise(torch.randn(16)).sum().item())
    model = MLP()
    opt = torch.compile(model, backend="fuse_all")
    with torch.no_grad():
        print(opt(torch.randn(4, 8)).sum().item())
"""

def line_of(text: str, source: str = SAMPLE_SOURCE) -> int:
    """1-based line of the first line of `source` that contains `text`."""
    for number, line in enumerate(source.splitlines(), start=1):
        if text in line:
            return number
    raise ValueError(f"{text!r} is not in the sample")


@dataclass(frozen=True)
class CompiledSample:
    workspace: Path
    source: Path
    artifact_dir: Path


def write_sample(workspace: Path, source: str = SAMPLE_SOURCE) -> Path:
    workspace.mkdir(parents=True, exist_ok=True)
    path = workspace / "example.py"
    path.write_text(source, encoding="utf-8")
    return path


def compile_sample(
    workspace: Path, python: str = sys.executable, timeout_s: float = 600, profile: bool = False
) -> CompiledSample:
    """Write the sample and compile it for real (the editor tests read what the compiler wrote);
    `profile`: run it under `python -m fuse_all.profiling` (CPU), which adds each record's profile."""
    source = write_sample(workspace)
    artifact_dir = workspace / "artifacts"
    artifact_dir.mkdir(exist_ok=True)
    runner = ["-m", "fuse_all.profiling", "--activities", "cpu"] if profile else []
    # The compiler's own caches (and output_code.py) go under XDG_CACHE_HOME: keep them in the workspace.
    environment = dict(
        os.environ, FUSE_ALL_ARTIFACT_DIR=str(artifact_dir), XDG_CACHE_HOME=str(workspace / "cache"), HF_HUB_OFFLINE="1"
    )
    try:
        run = subprocess.run(
            [python, *runner, str(source)], cwd=workspace, env=environment, capture_output=True, text=True, timeout=timeout_s
        )
        records = list(artifact_dir.glob("*.json"))
        output = (run.stderr or run.stdout).strip()[-600:]
        failure = (
            None if run.returncode == 0 and records else f"exit {run.returncode}, {len(records)} records; {output}"
        )
        if failure is None and profile and not all("profile" in json.loads(r.read_text()) for r in records):
            failure = f"a record has no profile section; {output}"
    except subprocess.TimeoutExpired:
        failure = f"the compile took more than {timeout_s:.0f} s"
    if failure is not None:
        raise RuntimeError(f"real compile of the sample failed: {failure}")
    return CompiledSample(workspace, source, artifact_dir)


_compiled: dict[bool, CompiledSample] = {}


def compile_sample_once(tmp_path_factory, profile: bool = False) -> CompiledSample:
    """One compile (and one profiled run) per pytest session, shared by tests/lsp and tests/editors."""
    if profile not in _compiled:
        folder = tmp_path_factory.mktemp("profiled" if profile else "compiled")
        _compiled[profile] = compile_sample(folder, profile=profile)
    return _compiled[profile]


def source_line(path: Path, line: int, aten_op: str, source: str = SAMPLE_SOURCE) -> dict:
    return {"file": str(path), "line": line, "code": source.splitlines()[line - 1].strip(), "aten_op": aten_op}


def cpp_kernel(name: str, body: list[str]) -> str:
    lines = [f'extern "C" void {name}(const float* in_ptr0, float* out_ptr0, long ks0)', "{"]
    lines += ["    #pragma omp parallel for", "    for (long i0 = 0; i0 < ks0; i0 += 1)", "    {"]
    lines += [f"        {statement}" for statement in body] + ["    }", "}"]
    return "\n".join(lines)


def make_record(source: Path, graph_id: str, function: str, first_line: int, last_line: int, **fields) -> dict:
    """A valid schema-1 record for a function of `source`; `fields` replace top-level fields."""
    record = {
        "schema": "fuse-all-artifact",
        "schema_version": 1,
        "graph_id": graph_id,
        "created": time.time(),
        "fuse_all_version": "0.1.0",
        "torch_version": "2.14.1",
        "device": "cpu",
        "mode": None,
        "graph_kind": "inference",
        "compile_time_s": 0.25,
        "function": {
            "name": function,
            "file": str(source),
            "first_line": first_line,
            "last_line": last_line,
            "source_sha256": hashlib.sha256(source.read_bytes()).hexdigest(),
        },
        "kernels": [],
        "externs": [],
        "fusion": {"groups": [], "rejected": []},
        "graph_breaks": [],
        "cudagraphs": {"enabled": False, "decision": "device is cpu"},
        "output_code": None,
    }
    record.update(fields)
    return record


def write_output_code(artifact_dir: Path, graph_id: str, kernels: list[dict]) -> Path:
    """An output_code.py holding the kernels' sources; sets each kernel's output_code_line."""
    lines = ["# fuse-all generated host program (fixture)", "import ctypes", "", "cpp_source = r'''"]
    for kernel in kernels:
        kernel["output_code_line"] = len(lines) + 1
        lines += [*kernel["source"].splitlines(), ""]
    lines += ["'''", "", "def call(args):", "    raise NotImplementedError('fixture output code')", ""]
    path = artifact_dir / "output" / graph_id / "output_code.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def write_record(artifact_dir: Path, record: dict) -> Path:
    artifact_dir.mkdir(parents=True, exist_ok=True)
    path = artifact_dir / f"{record['graph_id']}.json"
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(record, indent=1), encoding="utf-8")
    os.replace(temporary, path)
    return path


def write_fixture_records(source: Path, artifact_dir: Path) -> list[Path]:
    """What the compiler writes for SAMPLE_SOURCE: one graph for `pointwise`, one for MLP.forward."""
    cos, sin, out = line_of("torch.cos(x)"), line_of("torch.sin(a)"), line_of("return a * b")
    pointwise_kernel = {
        "name": "cpp_fused_add_cos_mul_sin_0",
        "language": "cpp",
        "kind": "pointwise",
        "source": cpp_kernel(
            "cpp_fused_add_cos_mul_sin_0",
            [
                "auto tmp0 = in_ptr0[i0];",
                "auto tmp1 = std::cos(tmp0);",
                "auto tmp2 = std::sin(tmp1);",
                "auto tmp3 = tmp1 * tmp2;",
                "out_ptr0[i0] = tmp3 + 1.0f;",
            ],
        ),
        "aten_ops": ["aten.cos.default", "aten.sin.default", "aten.mul.Tensor", "aten.add.Tensor"],
        "source_lines": [
            source_line(source, cos, "aten.cos.default"),
            source_line(source, sin, "aten.sin.default"),
            source_line(source, out, "aten.mul.Tensor"),
            source_line(source, out, "aten.add.Tensor"),
        ],
    }
    fc, relu = line_of("h = self.fc(x)"), line_of("torch.relu(h)")
    reduction_kernel = {
        "name": "cpp_fused_relu_sum_0",
        "language": "cpp",
        "kind": "reduction",
        "source": cpp_kernel(
            "cpp_fused_relu_sum_0",
            [
                "float acc = 0.0f;",
                "for (long r0 = 0; r0 < 8; r0 += 1)",
                "    acc += std::max(in_ptr0[8 * i0 + r0], 0.0f);",
                "out_ptr0[i0] = acc;",
            ],
        ),
        "aten_ops": ["aten.relu.default", "aten.sum.dim_IntList"],
        "source_lines": [
            source_line(source, relu, "aten.relu.default"),
            source_line(source, relu, "aten.sum.dim_IntList"),
        ],
    }
    graphs = [
        ("g_fixture01_0", "pointwise", line_of("def pointwise"), out, [pointwise_kernel], [], []),
        (
            "g_fixture02_0",
            "forward",
            line_of("def forward"),
            relu,
            [reduction_kernel],
            [
                {
                    "target": "aten.addmm.default",
                    "reason": "matmul runs in ATen by design",
                    "source_lines": [source_line(source, fc, "aten.addmm.default")],
                }
            ],
            [
                {
                    "kernel": "cpp_fused_relu_sum_0",
                    "nodes": ["relu", "sum_1"],
                    "why": "reduction with its pointwise prologue",
                }
            ],
        ),
    ]
    paths = []
    for graph_id, function, first, last, kernels, externs, groups in graphs:
        output_code = write_output_code(artifact_dir, graph_id, kernels)
        record = make_record(
            source,
            graph_id,
            function,
            first,
            last,
            kernels=kernels,
            externs=externs,
            fusion={"groups": groups, "rejected": []},
            output_code=str(output_code),
        )
        paths.append(write_record(artifact_dir, record))
    return paths


if __name__ == "__main__":
    outcome = compile_sample(Path(sys.argv[1]).resolve())
    print(
        json.dumps(
            {
                "source": str(outcome.source),
                "artifact_dir": str(outcome.artifact_dir),
            },
            indent=1,
        )
    )
