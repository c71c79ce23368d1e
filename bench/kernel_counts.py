"""Kernels and ATen calls per compiled graph, fuse_all beside Inductor (GPU issue 11 item 2: "kernels + ATen
calls per graph <= Inductor's on every model row").

    python bench/kernel_counts.py                                  # CPU: the default rows below
    python bench/kernel_counts.py --device cuda                    # the same rows on the GPU (Triton)
    python bench/kernel_counts.py --rows resnet50_inference --externs   # + which ATen calls each side makes

Each row is compiled twice in this process, with fuse_all and with Inductor, and run once (inference
under no_grad; training: forward, loss and backward, so the backward graph compiles too).
fuse_all's counts come from its artifact records (`kernels`, `externs`: docs/artifact-record.md), written
into a private temporary folder. Inductor's come from its generated host code (the `output_code` log
artifact): kernels are the `async_compile.*(...)` definitions (cpp_fused_* / triton_*), ATen calls the
`extern_kernels.*` and `torch.ops.*` / `aten.*` calls in `call()`. Graphs are paired in compile order
(both backends get the same Dynamo graphs); each side's graph kind is fuse_all's record's.
"""
from __future__ import annotations

import argparse
import collections
import functools
import json
import logging
import os
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import env  # noqa: E402

env.add_repo_paths()

import torch  # noqa: E402
import torch._inductor.config  # noqa: E402

import workloads  # noqa: E402

P = functools.partial
ROWS = {
    "resnet50_inference": P(workloads.resnet50, batch=2, channels=3, height=64, width=64),
    "resnet50_training": P(workloads.train_resnet50, batch=2, size=64),
    "bert_inference": P(workloads.bert, batch=1, seq=12),
    "bert_training": P(workloads.train_bert, batch=1, seq=12),
}


# ------------------------------------------------------------------------------------------- Inductor
class _OutputCode(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.codes: list[str] = []

    def emit(self, record):
        text = record.getMessage()
        if "def call(" in text and "async_compile" in text and text not in self.codes[-1:]:
            self.codes.append(text[text.index("\n") + 1:] if text.startswith("Output code") else text)


def _output_code_loggers():
    import torch._inductor.codecache  # noqa: F401 - creates the artifact loggers
    import torch._inductor.graph  # noqa: F401
    return [logging.getLogger(name) for name in list(logging.Logger.manager.loggerDict)
            if name.startswith("torch._inductor") and name.endswith("__output_code")]


_KERNEL_DEF = re.compile(r"^(\w+) = async_compile\.(\w+)\(", re.M)
_EXTERN_CALL = re.compile(r"\b(extern_kernels\.\w+|torch\.ops\.\w+\.\w+(?:\.\w+)?|aten\.\w+(?:\.\w+)?)\(")
# bookkeeping, not work: allocation and metadata calls Inductor's host code makes through torch.ops
_NOT_WORK = re.compile(r"(empty|as_strided|reinterpret|resize|_reinterpret_tensor|set_\b)")


def _call_body(code: str) -> str:
    match = re.search(r"^    def call\(|^def call\(", code, re.M)
    if match is None:
        return ""
    body = code[match.end():]
    end = re.search(r"^(?:def |class |if __name__|    def )", body, re.M)
    return body[:end.start()] if end else body


def count_inductor(code: str) -> dict:
    kernels = [name for name, _ in _KERNEL_DEF.findall(code)]
    body = _call_body(code)
    calls = [c for c in _EXTERN_CALL.findall(body) if not _NOT_WORK.search(c)]
    launches = sum(len(re.findall(rf"\b{re.escape(k)}(?:\.run)?\(", body)) for k in kernels)
    return {"kernels": len(kernels), "launches": launches, "externs": calls}


# ------------------------------------------------------------------------------------------- fuse_all
def count_fuse_all(record: dict) -> dict:
    return {"kernels": len(record["kernels"]), "launches": len(record["kernels"]),
            "externs": [e["target"] for e in record["externs"]], "kind": record["graph_kind"],
            "fallback": record.get("fallback_reason")}


# ------------------------------------------------------------------------------------------- running
def _run(row: str, device: str, backend: str, options=None):
    torch._dynamo.reset()
    instance = workloads.build(row, device) if row in workloads.WORKLOADS else _build(row, device)
    compiled = torch.compile(instance.target, backend=backend, options=options)
    instance.step(compiled)
    if device == "cuda":
        torch.cuda.synchronize()


def _build(row, device):
    torch.manual_seed(0)
    return ROWS[row](device)


def measure_row(row: str, device: str, inductor: bool = True) -> tuple[list[dict], list[dict]]:
    with tempfile.TemporaryDirectory(prefix="fa-kernel-counts-") as folder:
        previous = os.environ.get("FUSE_ALL_ARTIFACT_DIR")
        os.environ["FUSE_ALL_ARTIFACT_DIR"] = folder
        try:
            _run(row, device, "fuse_all")
        finally:
            if previous is None:
                os.environ.pop("FUSE_ALL_ARTIFACT_DIR", None)
            else:
                os.environ["FUSE_ALL_ARTIFACT_DIR"] = previous
        records = [json.loads(p.read_text()) for p in Path(folder).glob("*.json")]
    ours = [count_fuse_all(r) for r in sorted(records, key=lambda r: r["created"])]
    if not inductor:
        return ours, []

    handler = _OutputCode()
    loggers = _output_code_loggers()
    saved = [(lg, lg.level, lg.propagate) for lg in loggers]
    for lg in loggers:     # to our handler only: not printed
        lg.addHandler(handler)
        lg.setLevel(logging.DEBUG)
        lg.propagate = False
    try:
        # a cache hit would skip the compile whose output code we read
        with torch._inductor.config.patch(fx_graph_cache=False), _no_autograd_cache():
            _run(row, device, "inductor")
    finally:
        for lg, level, propagate in saved:
            lg.removeHandler(handler)
            lg.setLevel(level)
            lg.propagate = propagate
    theirs = [count_inductor(code) for code in handler.codes]
    return ours, theirs


def _no_autograd_cache():
    import contextlib
    import torch._functorch.config as functorch_config
    if hasattr(functorch_config, "enable_autograd_cache"):
        return functorch_config.patch(enable_autograd_cache=False)
    return contextlib.nullcontext()


def _total(c):
    return c["launches"] + len(c["externs"]) if c else None


def print_table(row: str, ours: list[dict], theirs: list[dict], show_externs: bool) -> list[dict]:
    lines = []
    print(f"\n{row}")
    print(f"  {'graph':<6} {'kind':<10} {'ours: kern':>10} {'aten':>5} {'sum':>5} | {'inductor: kern':>14} "
          f"{'aten':>5} {'sum':>5} | {'diff':>5}")
    for i in range(max(len(ours), len(theirs))):
        o = ours[i] if i < len(ours) else None
        t = theirs[i] if i < len(theirs) else None
        kind = o["kind"] if o else "?"
        diff = (_total(o) - _total(t)) if o and t else None
        flag = "  <-- more than Inductor" if diff and diff > 0 else ""
        if o and o.get("fallback"):
            flag += f"  (ran in ATen: {o['fallback']})"
        print(f"  {i:<6} {kind:<10} {o['launches'] if o else '-':>10} {len(o['externs']) if o else '-':>5} "
              f"{_total(o) if o else '-':>5} | {t['launches'] if t else '-':>14} {len(t['externs']) if t else '-':>5} "
              f"{_total(t) if t else '-':>5} | {diff if diff is not None else '-':>5}{flag}")
        if show_externs:
            for side, c in (("ours", o), ("inductor", t)):
                if c:
                    counted = collections.Counter(c["externs"])
                    print(f"         {side}: " + ", ".join(f"{k} x{n}" for k, n in counted.most_common()))
        lines.append({"row": row, "graph": i, "kind": kind, "ours": o, "inductor": t, "diff": diff})
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--rows", nargs="*", default=list(ROWS),
                        help=f"rows: {', '.join(ROWS)}, or any bench/workloads.py workload name")
    parser.add_argument("--externs", action="store_true", help="list each graph's ATen calls on both sides")
    parser.add_argument("--json", help="also write the counts to this file")
    parser.add_argument("--no-inductor", action="store_true", help="fuse_all's counts only (quick)")
    args = parser.parse_args(argv)
    results = []
    for row in args.rows:
        ours, theirs = measure_row(row, args.device, inductor=not args.no_inductor)
        results += print_table(row, ours, theirs, args.externs)
    worse = [r for r in results if r["diff"] is not None and r["diff"] > 0]
    print(f"\n{len(worse)} of {len(results)} graphs have more kernels + ATen calls than Inductor's")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
