"""Summary tables (markdown for bench/RESULTS.md, or aligned text) from the per-workload rows."""
from __future__ import annotations

import os
import re

ANCHORS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "anchors-h200.md")
# anchors-h200.md column -> (our backend key, field)
_ANCHOR_COLUMNS = {
    "eager ms": ("eager", "median_ms"), "inductor ms": ("inductor", "median_ms"),
    "inductor RO ms": ("inductor_ro", "median_ms"), "cudagraphs ms": ("cudagraphs", "median_ms"),
    "inductor cold compile s": ("inductor", "first_s"), "inductor RO cold compile s": ("inductor_ro", "first_s"),
}


def load_anchors(path: str = ANCHORS) -> dict[str, dict[tuple[str, str], float]]:
    """{workload: {(backend key, field): value}} from the first table of anchors-h200.md."""
    try:
        with open(path) as f:
            lines = [ln.strip() for ln in f if ln.strip().startswith("|")]
    except OSError:
        return {}
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    out: dict[str, dict] = {}
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) != len(header) or not re.match(r"^[a-z_]+[\dx_e]*$", cells[0]):
            break                                  # the end of the first table
        values = {}
        for column, text in zip(header[1:], cells[1:]):
            if column in _ANCHOR_COLUMNS and text:
                values[_ANCHOR_COLUMNS[column]] = float(text)
        out[cells[0]] = values
    return out


ANCHORED = ("inductor", "inductor_ro", "cudagraphs")


def apply_anchors(row: dict, anchors: dict, backends_run: list[str], skip_compile_time: bool) -> None:
    """Fill in from anchors-h200.md (same machine kind), marked `(anchor)` in the tables:
    - a torch backend left out of this run (--backends): all its numbers;
    - --skip-inductor-compile-time: Inductor's cold compile times (its runs here had caches on)."""
    known = anchors.get(row["workload"], {})
    for key in ANCHORED:
        values = {field: v for (k, field), v in known.items() if k == key}
        if key not in backends_run:
            if values:
                cell = row["cells"][key] = {"from_anchors": True, **values}
                if row.get("min_bytes") and "median_ms" in cell:
                    cell["gbps"] = row["min_bytes"] / (cell["median_ms"] * 1e-3) / 1e9
        elif skip_compile_time and key != "cudagraphs":
            cell = row["cells"].setdefault(key, {})
            cell["cold_s"] = values.get("first_s")
            cell["cold_source"] = "anchors" if cell["cold_s"] is not None else "none"


def _cold(cell: dict):
    """(cold compile seconds, taken from the anchors?): measured first call, or the anchors' number."""
    if cell.get("from_anchors"):
        return cell.get("first_s"), True
    if "cold_source" in cell:
        return cell.get("cold_s"), cell["cold_source"] == "anchors"
    return cell.get("first_s"), False


def _fmt(value, digits=3, suffix="") -> str:
    if value is None:
        return "–"
    if isinstance(value, str):
        return value
    if abs(value) >= 100:
        return f"{value:.1f}{suffix}"
    return f"{value:.{digits}g}{suffix}" if abs(value) < 0.01 else f"{value:.{digits}f}{suffix}"


def _cell(row: dict, key: str, field: str, digits=4):
    cell = row["cells"].get(key)
    if cell is None:
        return "–"
    value = cell.get(field)
    if value is None and "error" in cell:      # a failure after this field was measured keeps the field
        return "FAILED: " + cell["error"]
    return _fmt(value, digits) + (" (anchor)" if cell.get("from_anchors") and value is not None else "")


def _ratio(row, key_a, key_b, field="median_ms"):
    a, b = (row["cells"].get(k, {}).get(field) for k in (key_a, key_b))
    return f"{a / b:.2f}×" if a is not None and b else "–"


def runtime_table(rows: list[dict], device: str) -> tuple[list[str], list[list[str]]]:
    cuda = device == "cuda"
    head = ["workload", "eager ms", "inductor ms", "fuse_all ms", "fuse_all/inductor"]
    if cuda:
        head += ["inductor RO ms", "fuse_all RO ms", "fuse_all RO/inductor RO", "cudagraphs ms"]
    head += ["inductor GB/s", "fuse_all GB/s", "fuse_all check", "fuse_all graphs"]
    body = []
    for r in rows:
        if "error" in r:
            why = "skipped (time budget)" if r.get("skipped") else "FAILED: " + r["error"]
            body.append([r["workload"], why] + [""] * (len(head) - 2))
            continue
        line = [r["workload"], _cell(r, "eager", "median_ms"), _cell(r, "inductor", "median_ms"),
                _cell(r, "fuse_all", "median_ms"), _ratio(r, "fuse_all", "inductor")]
        if cuda:
            line += [_cell(r, "inductor_ro", "median_ms"), _cell(r, "fuse_all_ro", "median_ms") + _plain(r),
                     _ratio(r, "fuse_all_ro", "inductor_ro"), _cell(r, "cudagraphs", "median_ms")]
        gb = [_fmt(c.get("gbps"), 4) + (" (anchor)" if c.get("from_anchors") and c.get("gbps") else "")
              for c in (r["cells"].get(k, {}) for k in ("inductor", "fuse_all"))]
        fa = r["cells"].get("fuse_all", {})
        check = fa.get("check") or ("FAILED: " + fa["error"] if "error" in fa else "–")
        line += gb + [check, _graphs(fa)]
        body.append(line)
    return head, body


def _plain(row: dict) -> str:
    """Calls that ran without a CUDA graph while fuse_all RO was timed (it should only replay)."""
    calls = row["cells"].get("fuse_all_ro", {}).get("graph_calls") or {}
    plain = {k.split()[0]: v for k, v in calls.items() if k.endswith("plain_calls") and v}
    return "".join(f" ({v} {kind} calls without graph)" for kind, v in plain.items())


def _graphs(cell: dict) -> str:
    s = cell.get("fuse_all")
    if not s:
        return "–"
    text = f"{s['graphs']} ({'/'.join(s['kinds'])}), {s['kernels']} kernels, {s['externs']} ATen"
    return text + (f", FALLBACK {s['fallbacks'][0]}" if s["fallbacks"] else "")


def _count(value) -> str:
    return "–" if value is None else str(value)


def launch_table(rows: list[dict], device: str) -> tuple[list[str], list[list[str]]]:
    """Kernels and ATen calls per step (torch.profiler, launches.py), and on CUDA the host µs per kernel:
    (default-mode median − reduce-overhead median) / kernels."""
    from launches import host_us_per_kernel
    cuda = device == "cuda"
    head = ["workload"]
    if cuda:
        head += ["inductor kernels", "fuse_all kernels"]
    head += ["inductor ATen calls", "fuse_all ATen calls"]
    if cuda:
        head += ["inductor host µs/kernel", "fuse_all host µs/kernel"]
    body = []
    for r in rows:
        counts = {k: r["cells"].get(k, {}).get("launches") or {} for k in ("inductor", "fuse_all")}
        if "error" in r or not any(counts.values()):
            continue
        line = [r["workload"]]
        if cuda:
            line += [_count(counts[k].get("kernels")) for k in ("inductor", "fuse_all")]
        line += [_count(counts[k].get("aten")) for k in ("inductor", "fuse_all")]
        if cuda:
            for key in ("inductor", "fuse_all"):
                default, ro = (r["cells"].get(k, {}).get("median_ms") for k in (key, key + "_ro"))
                line.append(_fmt(host_us_per_kernel(default, ro, counts[key].get("kernels")), 3))
        body.append(line)
    return head, body


def compile_table(rows: list[dict], device: str) -> tuple[list[str], list[list[str]]]:
    cuda = device == "cuda"
    head = ["workload", "aot_eager first call s", "inductor cold s", "fuse_all cold s", "fuse_all warm s",
            "inductor overhead s", "fuse_all overhead s", "overhead fuse_all/inductor"]
    if cuda:
        head += ["inductor RO cold s", "fuse_all RO cold s", "cudagraphs first call s"]
    body = []
    for r in rows:
        if "error" in r:
            continue
        floor = r["cells"].get("aot_eager", {}).get("first_s")
        ind, from_anchor = _cold(r["cells"].get("inductor", {}))
        fa = r["cells"].get("fuse_all", {}).get("first_s")
        ind_over = ind - floor if ind is not None and floor is not None else None
        fa_over = fa - floor if fa is not None and floor is not None else None
        ratio = f"{fa_over / ind_over:.2f}×" if fa_over is not None and ind_over and ind_over > 0 else "–"
        warm = r.get("fuse_all_warm", {})
        line = [r["workload"], _cell(r, "aot_eager", "first_s", 3),
                _cold_text(r, "inductor", ind, from_anchor),
                _cell(r, "fuse_all", "first_s", 3),
                ("FAILED: " + warm["error"]) if "error" in warm else _fmt(warm.get("first_s"), 3),
                _fmt(ind_over, 3), _fmt(fa_over, 3), ratio]
        if cuda:
            ro, ro_anchor = _cold(r["cells"].get("inductor_ro", {}))
            line += [_cold_text(r, "inductor_ro", ro, ro_anchor), _cell(r, "fuse_all_ro", "first_s", 3),
                     _cell(r, "cudagraphs", "first_s", 3)]
        body.append(line)
    return head, body


def _cold_text(row: dict, key: str, value, from_anchor: bool) -> str:
    cell = row["cells"].get(key, {})
    if "cold_source" in cell or cell.get("from_anchors"):
        return _fmt(value, 3) + " (anchor)" if from_anchor else "– (not measured)"
    return _cell(row, key, "first_s", 3)


def render(head: list[str], body: list[list[str]], markdown: bool) -> str:
    if markdown:
        esc = [[c.replace("|", "\\|") for c in row] for row in body]
        return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
                         + ["| " + " | ".join(row) + " |" for row in esc])
    body = [[c if len(c) <= 48 else c[:47] + "…" for c in row] for row in body]   # terminal width
    widths = [max(len(str(row[i])) for row in [head] + body) for i in range(len(head))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in [head] + body)


def header(meta: dict, markdown: bool) -> str:
    m = meta["machine"]
    lines = [
        f"{'### ' if markdown else ''}fuse_all benchmark, {meta['date']}, device: {m['device']} ({meta['device']})",
        f"python {m['python']}, torch {m['torch']}, triton {m['triton']}, torchvision {m['torchvision']}, "
        f"timm {m['timm']}, transformers {m['transformers']}; {m['cores']} cores, {m['threads']} torch threads, "
        f"load average at start {m.get('load_1min')}",
        f"command: `{meta['command']}`",
        f"first compile of the process (priming, excluded from the cells): {meta.get('prime') or 'not primed'}; "
        "each workload is traced once with aot_eager before its cells are measured (excluded)",
        "inductor cold compile: " + ("from anchors-h200.md (marked `(anchor)`), the runs here had caches on"
                                     if meta.get("skip_inductor_compile_time")
                                     else "measured here, TORCHINDUCTOR_FORCE_DISABLE_CACHES=1"),
        "cells marked `(anchor)` come from bench/anchors-h200.md (one H200, 2026-11-29), not from this run; "
        "`–`: not measured",
    ]
    return ("\n\n" if markdown else "\n").join(lines)


def summary(meta: dict, rows: list[dict], markdown: bool) -> str:
    device = meta["device"]
    interleaved = any("rounds_ms" in c for r in rows for c in r.get("cells", {}).values())
    how = ("median of 3 rounds taken after every backend of the row compiled, rotating which goes first"
           if interleaved else "median")
    parts = [header(meta, markdown), "", (f"**Runtime** ({how})" if markdown else f"Runtime ({how})"),
             "", render(*runtime_table(rows, device), markdown), "",
             ("**Compile time** (first call; overhead = first call − aot_eager's first call)" if markdown
              else "Compile time (first call; overhead = first call - aot_eager's first call)"),
             "", render(*compile_table(rows, device), markdown)]
    launches = launch_table(rows, device)
    if launches[1]:
        parts += ["", ("**Launches per step** (torch.profiler; host µs/kernel = (default − reduce-overhead) / "
                       "kernels)" if markdown else "Launches per step (host us/kernel = (default - RO) / kernels)"),
                  "", render(*launches, markdown)]
    import compile_columns
    for title, table in (("fuse_all first call by phase, s (compile_columns.py)", compile_columns.phase_table),
                         ("First call in new processes, s (cold: empty caches; warm: caches kept)",
                          compile_columns.process_table)):
        head, body = table(rows)
        if body:
            parts += ["", f"**{title}**" if markdown else title, "", render(head, body, markdown)]
    return "\n".join(parts)
