"""Every knob of fuse-all in one place: the `FUSE_ALL_*` environment variables and the `options=` keys.

`VARIABLES` is the table the README's "Configuration" section shows (a test keeps the two in step, and
checks that no `FUSE_ALL_*` variable is read anywhere in the sources without being listed here). The
stages are separate packages that must not import this one, so some read their own variable; this module
is where each is *declared*, documented and, where the meta-package needs it, read.

The cache root (`FUSE_ALL_CACHE_DIR`) is resolved by `fuse_all_ir.cache_root()` where that exists, so the
rule lives in one place for every stage; `cache_root()` here only delegates.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from .options import Options

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


@dataclass(frozen=True)
class Variable:
    name: str
    default: str
    read_by: str
    meaning: str


# Variables that change the code a compile generates: part of the graph cache's key (graph_cache.cache_tag),
# so a warm start after flipping one compiles again instead of loading code made without it.
CODE_VARIABLES = ("FUSE_ALL_COLUMN_SPLITS", "FUSE_ALL_REUSE_BUFFERS", "FUSE_ALL_LAYOUT_OPT", "FUSE_ALL_CXXFLAGS",
                  "FUSE_ALL_SMALL_MATMUL_ROWS", "FUSE_ALL_CONV_EPILOGUE", "FUSE_ALL_TF32X3_MATMUL",
                  "FUSE_ALL_GROUPED_CONV_MATMUL")

VARIABLES: tuple[Variable, ...] = (
    Variable("FUSE_ALL_CACHE_DIR", "`~/.cache/fuse-all`", "all stages",
             "root of the caches (host programs, C++ builds, Triton autotune results); created 0700"),
    Variable("FUSE_ALL_FORCE_DISABLE_CACHES", "off", "all stages",
             "`1`: read nothing from the caches (C++ libraries, host programs, Triton kernels and autotune "
             "results) and keep nothing: every compile runs in full in private temporary folders; for "
             "measuring compile time (torch's `TORCHINDUCTOR_FORCE_DISABLE_CACHES=1` does the same)"),
    Variable("FUSE_ALL_ARTIFACT_DIR", "`<cache dir>/fuse-all/artifacts`", "fuse_all, fuse_all_lsp",
             "where the editor's artifact records are written and read"),
    Variable("FUSE_ALL_DEBUG", "off", "fuse_all",
             "`1`: write the debug folder (also `options={\"debug\": True}` or `TORCH_COMPILE_DEBUG=1`)"),
    Variable("FUSE_ALL_VALIDATE", "off", "fuse_all_ir",
             "`1`: check every Program against the codegen contract before codegen (on in debug mode and "
             "in the test suite); a violation is a compile error, so the graph runs in ATen"),
    Variable("FUSE_ALL_DEBUG_DIR", "`./fuse_all_debug/run_<time>_<pid>`", "fuse_all",
             "the debug folder's root (with `TORCH_COMPILE_DEBUG=1` the default is torch's own run folder)"),
    Variable("FUSE_ALL_PROGRESS", "`auto`", "fuse_all",
             "`auto`: progress on a terminal for compiles over 2 s; `1`: always (also to a non-terminal); "
             "`0`: never (also `options={\"progress\": False}`)"),
    Variable("FUSE_ALL_CXXFLAGS", "empty", "fuse_all_codegen_cpp", "extra flags for the C++ compiler"),
    Variable("FUSE_ALL_COMPILE_THREADS", "CPU count (at most 32)", "fuse_all_codegen_triton",
             "threads compiling Triton kernels in parallel"),
    Variable("FUSE_ALL_REUSE_BUFFERS", "`1`", "fuse_all_ir",
             "`0`: every intermediate buffer gets its own allocation (off: no reuse of dead buffers' memory, "
             "no in-place outputs)"),
    Variable("FUSE_ALL_GC_PAUSE", "`1`", "fuse_all_ir",
             "`0`: leave Python's cyclic garbage collector running while a graph compiles (by default it is "
             "paused while the backend traces and compiles a graph: its full collections walk the whole process)"),
    Variable("FUSE_ALL_COMPILE_WORKERS", "`processes`", "fuse_all_codegen_triton",
             "`processes`: each compile thread hands its Triton compile to a worker process (Triton only, no "
             "torch; the GIL would serialise the compilers' Python front ends), which fills Triton's cache; "
             "`threads`: compile in the threads themselves"),
    Variable("FUSE_ALL_TRITON_DIRECT_LAUNCH", "`1`", "fuse_all_codegen_triton",
             "`0`: launch Triton kernels through Triton's own launcher instead of the fast path (Triton 3.6)"),
    Variable("FUSE_ALL_LAYOUT_OPT", "`1`", "fuse_all",
             "`0`: no channels-last convolutions (Inductor's layout optimisation: activations of convolution "
             "graphs run NHWC where its heuristics expect a gain; also `options={\"layout_opt\": False}`)"),
    Variable("FUSE_ALL_COLUMN_SPLITS", "chosen per kernel", "fuse_all_ir",
             "`n`: split every splittable reduction compiled for Triton (column or contiguous) into `n` chunks (a "
             "partial and a final kernel per reduction phase); for tests and experiments"),
    Variable("FUSE_ALL_SMALL_MATMUL_ROWS", "`16`", "fuse_all_codegen_triton",
             "`mm`/`addmm` with at most this many static rows or columns run as generated reductions fused with "
             "their bias add and consumers instead of cuBLAS; `0`: every matrix product in cuBLAS"),
    Variable("FUSE_ALL_CONV_EPILOGUE", "`1`", "fuse_all_codegen_triton",
             "`0`: inference convolution + BatchNorm [+ residual] + ReLU blocks stay a cuDNN convolution and a "
             "generated kernel instead of one cuDNN call with the BatchNorm folded into the weights"),
    Variable("FUSE_ALL_GROUPED_CONV_MATMUL", "`1`", "fuse_all_codegen_triton",
             "`0`: grouped convolutions of 1 x 1 inputs into 1 x 1 outputs (inference, CUDA) stay cuDNN calls "
             "instead of a batched matrix product of the one weight tap they read"),
    Variable("FUSE_ALL_TF32X3_MATMUL", "`1`", "fuse_all_codegen_triton",
             "`0`: large float32 `mm`/`bmm`/`addmm` on CUDA stay cuBLAS calls instead of the op that runs each "
             "call signature on tensor cores (three TF32 products per multiply) or in cuBLAS, whichever its first "
             "call measures faster"),
)

# Variables read only by the test suite, the benchmark scripts and the editor tests; not user settings.
DEVELOPMENT_VARIABLES = (
    "FUSE_ALL_TEST_BACKEND", "FUSE_ALL_TEST_BISECT", "FUSE_ALL_TEST_STRICT",
    "FUSE_ALL_CI_TOOLS", "FUSE_ALL_CHROMIUM", "FUSE_ALL_CODE_SERVER", "FUSE_ALL_NVIM", "FUSE_ALL_NVIM_TEST",
    "FUSE_ALL_VSIX", "FUSE_ALL_GPU_SITE",
)

# torch's own variables that change what fuse-all does.
TORCH_VARIABLES = {
    "TORCH_COMPILE_DEBUG": "`1`: the debug folder, inside torch's `torch_compile_debug/run_*/fuse_all/`",
    "TORCH_LOGS": "`fuse_all` (INFO line per graph), `+fuse_all` (DEBUG), and the artifacts `output_code`, "
                  "`ir_pre_fusion`, `ir_post_fusion`, `fusion`, `schedule`, `kernel_code`, `cudagraphs`",
    "TORCH_TRACE": "a folder: structured artifacts per compile id for `tlparse`",
    "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "`1`: fuse-all's caches are off too (as `FUSE_ALL_FORCE_DISABLE_CACHES`)",
}

OPTION_HELP = {
    "codegen": "`auto` (the registered target for the tensors' device type) or a target's name; "
               "`fuse-all doctor` lists the targets (built in: `cpp` for CPU, `triton` for CUDA/XPU)",
    "cudagraphs": "capture and replay CUDA graphs (on with `mode=\"reduce-overhead\"`)",
    "autotune": "benchmark Triton configs at the first launch (else heuristics)",
    "max_autotune": "a wider space of Triton configs to benchmark (mode=\"max-autotune\" turns it on)",
    "fallback": "on a compile error run the graph in ATen with a warning (`False`: raise)",
    "debug": "write the debug folder for this compile",
    "progress": "`None`: `FUSE_ALL_PROGRESS` decides; `False`: no progress line; `True`: always",
    "layout_opt": "`None`: `FUSE_ALL_LAYOUT_OPT` decides (on unless `0`); `False`: convolutions keep the traced "
                  "layout; `True`: channels-last where the heuristics expect a gain",
    "weight_layout_cache": "CPU inference graphs: keep the channels-last copy of a convolution weight that "
                           "oneDNN would make at every call, while the parameter is unchanged (same object, "
                           "storage and `_version`). Without it, an inference graph without depthwise "
                           "convolutions stays NCHW (the per-call weight copies cost more than channels-last "
                           "saves); with it, such graphs run channels-last. Off by default: writes through "
                           "`p.data` (EMA updates, manual re-initialisation) do not bump `_version` and would "
                           "go unseen",
}


def variable(name: str) -> Variable:
    for entry in VARIABLES:
        if entry.name == name:
            return entry
    raise KeyError(f"{name} is not a fuse-all setting; known: {', '.join(v.name for v in VARIABLES)}")


def flag(name: str, env: Mapping[str, str] | None = None) -> bool | None:
    """True/False for a set boolean variable (1/true/yes/on, 0/false/no/off), None when unset or `auto`."""
    env = os.environ if env is None else env
    value = env.get(name, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    return None


def cache_root(env: Mapping[str, str] | None = None) -> Path:
    """The cache root; `fuse_all_ir.cache_root()` owns the rule when it exists."""
    try:
        from fuse_all_ir import cache_root as ir_cache_root  # type: ignore[attr-defined]
    except ImportError:
        ir_cache_root = None
    if ir_cache_root is not None and env is None:
        return Path(ir_cache_root())
    env = os.environ if env is None else env
    if env.get("FUSE_ALL_CACHE_DIR"):
        return Path(env["FUSE_ALL_CACHE_DIR"]).expanduser()
    return Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fuse-all"


def markdown_table() -> str:
    """The README's table of variables and options."""
    rows = ["| setting | default | read by | what it does |", "|---|---|---|---|"]
    rows += [f"| `{v.name}` | {v.default} | {v.read_by} | {v.meaning} |" for v in VARIABLES]
    rows += [f"| `{name}` | unset | torch, fuse_all | {meaning} |" for name, meaning in TORCH_VARIABLES.items()]
    defaults = Options()
    rows += [f"| `options={{\"{name}\": …}}` | `{getattr(defaults, name)!r}` | fuse_all | {meaning} |"
             for name, meaning in OPTION_HELP.items()]
    return "\n".join(rows)
