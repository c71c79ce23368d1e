"""What one compile shows to the tools: the debug folder, TORCH_LOGS artifacts, TORCH_TRACE artifacts, the
fusion SVG and the one-line summary. Each text is built once, and only when some sink wants it; every
sink is best effort (a failure is logged, the compile goes on)."""
from __future__ import annotations

import functools
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import fuse_all_capture as capture
import fuse_all_ir as ir

from . import debug, fusion_svg, logs, torch_compat

log = logging.getLogger("fuse_all")

_REPRO_MAIN = '''
if __name__ == "__main__":
    # fuse-all: run the captured graph on random inputs in eager and through fuse_all, and compare.
    import sys
    from torch._dynamo.debug_utils import InputReader
    reader = InputReader()
    load_args(reader)
    args = reader.args
    with torch.no_grad():
        expected = mod(*args)
        actual = torch.compile(mod, backend="fuse_all")(*args)
    worst = 0.0
    for e, a in zip(torch.utils._pytree.tree_leaves(expected), torch.utils._pytree.tree_leaves(actual)):
        if isinstance(e, torch.Tensor):
            torch.testing.assert_close(a, e, rtol=1e-3, atol=1e-3, equal_nan=True)
            if e.numel():
                worst = max(worst, (a.double() - e.double()).abs().max().item())
    print(f"fuse_all matches eager on random inputs (largest difference {worst:.3g})")
'''


@dataclass
class GraphOutputs:
    """Filled in by the backend as the compile goes; `finish` hands it to the tools."""
    graph: Any
    compiled: Any = None            # fuse_all_ir.Compiled
    host_source: str | None = None
    phases: dict[str, float] = field(default_factory=dict)
    compile_id: str | None = None
    aot_name: str | None = None

    @classmethod
    def start(cls, graph) -> GraphOutputs:
        return cls(graph, compile_id=torch_compat.compile_id(), aot_name=torch_compat.aot_graph_name())

    def timed(self, phase: str):
        return _Phase(self.phases, phase)

    @functools.cached_property
    def aten_graph(self) -> str:
        return capture.format_graph(self.graph)

    @functools.cached_property
    def ir_before(self) -> str:
        return ir.format_lowered(self.compiled.lowered)

    @functools.cached_property
    def ir_after(self) -> str:
        return ir.format_program(self.compiled.program)

    fell_back: bool = False         # the graph runs in ATen (what was lowered, if anything, does not run)

    @property
    def report(self):
        """The fusion report of what was lowered (also when a later stage failed), or None."""
        return self.compiled.program.report if self.compiled is not None else None

    @functools.cached_property
    def svg(self) -> str:
        program = self.compiled.program if self.compiled is not None and not self.fell_back else None
        return fusion_svg.fusion_svg(self.graph, program)

    def repro(self) -> str:
        return torch_compat.repro_source(self.graph.graph_module, self.graph.example_inputs) + _REPRO_MAIN

    def schedule(self) -> str:
        program = self.compiled.program
        lines = []
        for index, step in enumerate(program.steps):
            if isinstance(step, ir.KernelCall):
                kernel = program.kernels[step.kernel]
                lines.append(f"{index:4d}  kernel {step.kernel} ({kernel.kind}): {', '.join(kernel.fused_nodes)}")
            elif isinstance(step, ir.ExternCall):
                lines.append(f"{index:4d}  ATen {step.target}: {step.reason}")
        return "\n".join(lines)


class _Phase:
    def __init__(self, phases: dict[str, float], name: str):
        self.phases, self.name = phases, name

    def __enter__(self):
        self.start = time.perf_counter()

    def __exit__(self, *exc):
        self.phases[self.name] = self.phases.get(self.name, 0.0) + time.perf_counter() - self.start


def summary(outputs: GraphOutputs, record: Any) -> dict[str, Any]:
    report = record.report.to_json() if getattr(record, "report", None) is not None else {}
    return {
        "graph_id": outputs.graph.graph_id, "compile_id": outputs.compile_id, "aot_graph": outputs.aot_name,
        "kind": outputs.graph.kind, "device": str(outputs.graph.device), "language": record.language,
        "kernels": len(record.kernels), "aten_calls": len(record.externs),
        "fused_ops": sum(len(g.get("aten_ops", ())) for g in report.get("groups", ())),
        "rejected_pairs": len(report.get("rejected", ())),
        "compile_time_s": round(record.compile_time_s, 4), "phases_s": {k: round(v, 4) for k, v in outputs.phases.items()},
        "fallback_reason": record.fallback_reason, "layout": getattr(record, "layout", None),
    }


def finish(outputs: GraphOutputs, record: Any, force_debug: bool = False) -> None:
    """Debug folder, logs and trace for one compiled graph; sets `record.fusion_svg`/`compile_id`/`debug_dir`."""
    record.compile_id = outputs.compile_id
    outputs.fell_back = bool(record.fallback_reason)
    function = outputs.graph.function
    if function is not None:
        record.function = f"{function.qualname or function.name} ({function.file}:{function.first_line})"
    facts = summary(outputs, record)
    for sink in (_debug_folder, _torch_logs, _torch_trace):
        try:
            sink(outputs, record, facts, force_debug)
        except Exception as error:  # noqa: BLE001 - tooling output never breaks a compile
            log.warning("fuse-all: %s output for %s failed: %s: %s", sink.__name__.strip("_").replace("_", " "),
                        outputs.graph.graph_id, type(error).__name__, error)
    logs.log_summary(facts)


def _debug_folder(outputs: GraphOutputs, record: Any, facts: dict, force: bool) -> None:
    folder = debug.DebugDir.for_graph(outputs.graph.graph_id, force=force, aot_name=outputs.aot_name)
    if folder is None:
        return
    record.debug_dir = str(folder.path)
    folder.write(debug.ATEN_GRAPH, outputs.aten_graph)
    folder.write(debug.GRAPH_JSON, json.dumps(facts, indent=2) + "\n")
    try:
        folder.write(debug.FX_GRAPH_RUNNABLE, outputs.repro())
    except Exception as error:  # noqa: BLE001 - e.g. an input torch's repro writer cannot describe
        folder.write(debug.FX_GRAPH_RUNNABLE, f"# fuse-all: no repro: {type(error).__name__}: {error}\n")
    svg = folder.write(debug.FUSION_SVG, outputs.svg)
    record.fusion_svg = str(svg) if svg else None
    if outputs.compiled is None:
        return
    folder.write(debug.IR_BEFORE_FUSION, outputs.ir_before)
    folder.write(debug.IR_AFTER_FUSION, outputs.ir_after)
    folder.write(debug.FUSION_REPORT, outputs.report.to_text())
    for name, text in record.kernel_sources.items():
        folder.write_kernel(name, text, record.language)
    if outputs.host_source is not None:
        folder.write(debug.OUTPUT_CODE, outputs.host_source)


def _torch_logs(outputs: GraphOutputs, record: Any, facts: dict, force: bool) -> None:
    title = f"fuse_all {facts['kind']} graph {facts['graph_id']} [{facts['compile_id']}]"
    if outputs.compiled is None:
        return
    logs.log_artifact("output_code", f"Output code of {title}:", lambda: outputs.host_source or "")
    logs.log_artifact("kernel_code", f"Kernels of {title}:", lambda: "\n\n".join(
        f"# {name}\n{text}" for name, text in record.kernel_sources.items()))
    logs.log_artifact("ir_pre_fusion", f"IR before fusion of {title}:", lambda: outputs.ir_before)
    logs.log_artifact("ir_post_fusion", f"IR after fusion of {title}:", lambda: outputs.ir_after)
    logs.log_artifact("fusion", f"Fusion of {title}:", outputs.report.to_text)
    logs.log_artifact("schedule", f"Schedule of {title}:", outputs.schedule)
    decisions = (record.cudagraphs or {}).get("decisions")
    if decisions:
        logs.log_artifact("cudagraphs", f"CUDA graphs for {title}:", lambda: "\n".join(map(str, decisions)))


def _torch_trace(outputs: GraphOutputs, record: Any, facts: dict, force: bool) -> None:
    if not logs.trace_enabled():
        return
    kind = outputs.graph.kind   # forward and backward share a compile id: the name tells them apart
    logs.trace_text(f"{kind}_aten_graph", lambda: outputs.aten_graph)
    if outputs.compiled is not None:
        logs.trace_text(f"{kind}_ir_pre_fusion", lambda: outputs.ir_before)
        logs.trace_text(f"{kind}_ir_post_fusion", lambda: outputs.ir_after)
        logs.trace_json(f"{kind}_fusion_report", outputs.report.to_json)
        for name, text in record.kernel_sources.items():
            logs.trace_text(f"{kind}_kernel_{name}", lambda text=text: text)
        if outputs.host_source is not None:
            logs.trace_text(f"{kind}_output_code", lambda: outputs.host_source)
        logs.trace_text(f"{kind}_fusion_svg", lambda: outputs.svg)
    logs.trace_json(f"{kind}_compile_phases", lambda: facts["phases_s"])
    logs.trace_json(f"{kind}_summary", lambda: facts)
