"""The fusion report: what went into each kernel and why, and a reason for every pair kept apart."""
from __future__ import annotations

from dataclasses import dataclass, field


def origin_dict(origin) -> dict:
    return {"file": origin.file, "line": origin.line, "code": origin.code, "aten_op": origin.aten_op}


@dataclass
class FusionReport:
    groups: list = field(default_factory=list)      # dicts: kernel, nodes, why, aten_ops, origins
    rejected: list = field(default_factory=list)    # dicts: producer, consumer, reason, origins
    externs: list = field(default_factory=list)     # dicts: target, reason, origins
    inlined: int = 0                                # ATen ops folded into their single consumer's expression
    siblings_kept_apart: list = field(default_factory=list)   # dicts: first, second (node names), reason
    layout: str = ""                                # the channels-last decision (fuse_all_ir.layout), if made

    def reject(self, producer: str, consumer: str, reason: str, origins=()):
        self.rejected.append({"producer": producer, "consumer": consumer, "reason": reason,
                              "origins": [o for o in origins if o is not None]})

    def to_json(self) -> dict:
        def lines(origins):
            return [origin_dict(o) for o in origins if o.file]
        return {
            "groups": [{"kernel": g["kernel"], "nodes": g["nodes"], "why": g["why"], "aten_ops": g["aten_ops"],
                        "source_lines": lines(g["origins"])} for g in self.groups],
            "rejected": [{"producer": r["producer"], "consumer": r["consumer"], "reason": r["reason"],
                          "source_lines": lines(r["origins"])} for r in self.rejected],
            "inlined_ops": self.inlined,
            "siblings_kept_apart": [dict(s) for s in self.siblings_kept_apart],
            "layout": self.layout,
        }

    def to_text(self) -> str:
        out = [f"fusion report: {len(self.groups)} kernels, {len(self.externs)} ATen calls, "
               f"{self.inlined} ops inlined into their consumer", ""]
        if self.layout:
            out[1:1] = [f"layout: {self.layout}"]
        for g in self.groups:
            out.append(f"{g['kernel']}: {g['why']}")
            out.append(f"    nodes: {', '.join(g['nodes'])}")
            out.append(f"    aten ops: {', '.join(g['aten_ops'])}")
            for line in sorted({(o.file, o.line, o.code) for o in g["origins"] if o.file},
                               key=lambda t: (t[0], t[1])):
                out.append(f"    from {line[0]}:{line[1]}  {line[2]}")
        if self.externs:
            out.append("")
            out.append("ATen calls:")
            for e in self.externs:
                out.append(f"    {e['target']}: {e['reason']}")
        if self.rejected:
            out.append("")
            out.append("not fused:")
            for r in self.rejected:
                out.append(f"    {r['producer']} -> {r['consumer']}: {r['reason']}")
        if self.siblings_kept_apart:
            out.append("")
            out.append("siblings sharing reads, not fused:")
            for s in self.siblings_kept_apart:
                out.append(f"    [{', '.join(s['first'])}] / [{', '.join(s['second'])}]: {s['reason']}")
        return "\n".join(out) + "\n"
