"""The fuzz program's data: input specs (shape per call, dtype, memory layout, value range), the values the
generator tracks, the `Program` (straight-line text), the namespace the text runs in (`cast` and the dtype
names F16/BF16/F32/F64/I32/I64/BOOL; the float64 reference widens after each rounding cast), and
`make_input`, which builds an input with its spec's layout."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

DTYPE_NAMES = {torch.float16: "F16", torch.bfloat16: "BF16", torch.float32: "F32", torch.float64: "F64",
               torch.int32: "I32", torch.int64: "I64", torch.bool: "BOOL"}
FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
LOW = (torch.float16, torch.bfloat16)
INTS = (torch.int32, torch.int64)
SIZES = (1, 2, 3, 4, 5, 7, 8, 11, 13, 16, 17, 31, 32, 33, 64)
MAX_NUMEL = 6000          # per value, for ordinary programs
BIG_ROWS = (65537, 70001)  # > 2**16 rows, for the few "big" programs
BIG_NUMEL = 300_000
HUGE_SUM = 600_000        # long mode: sums over 0.5-5 M elements (issue 9 item 4)
FLOAT_LIMIT = {torch.float16: 1e3, torch.bfloat16: 1e4, torch.float32: 1e6, torch.float64: 1e6}



@dataclass
class InputSpec:
    name: str
    shapes: list            # one logical shape per call
    dtype: torch.dtype
    perm: tuple             # memory order of the dims (outermost first)
    steps: tuple            # step per dim (sliced layouts)
    expanded: tuple         # dims that are broadcast (stride 0) in memory
    offset: int             # extra storage offset
    lo: float
    hi: float
    requires_grad: bool = False

    def layout_name(self) -> str:
        parts = []
        if self.perm != tuple(range(len(self.perm))):
            parts.append(f"perm{list(self.perm)}")
        if any(s != 1 for s in self.steps):
            parts.append(f"steps{list(self.steps)}")
        if self.expanded:
            parts.append(f"expanded{list(self.expanded)}")
        if self.offset:
            parts.append(f"offset{self.offset}")
        return ",".join(parts) or "contiguous"


@dataclass
class Val:
    name: str
    metas: list             # meta tensor per call
    lo: float
    hi: float
    exact: bool
    is_input: bool = False

    @property
    def meta(self):
        return self.metas[0]

    @property
    def dtype(self):
        return self.meta.dtype

    @property
    def ndim(self):
        return self.meta.dim()

    def bound(self):
        return max(abs(self.lo), abs(self.hi))


@dataclass
class Program:
    seed: int
    index: int
    inputs: list
    lines: list             # (target name, expression, tag)
    outputs: list
    dynamic: bool = False   # compile with dynamic=True, call with each shape set
    train: bool = False
    tags: list = field(default_factory=list)
    exact_names: set = field(default_factory=set)

    @property
    def calls(self) -> int:
        return len(self.inputs[0].shapes)

    def source(self, lines=None, outputs=None) -> str:
        lines = self.lines if lines is None else lines
        outputs = self.outputs if outputs is None else outputs
        args = ", ".join(i.name for i in self.inputs)
        body = [f"    {t} = {e}" for t, e, _ in lines]
        return "\n".join([f"def program({args}):"] + body + [f"    return ({', '.join(outputs)},)"]) + "\n"

    def describe(self) -> str:
        heads = [f"# program seed={self.seed} index={self.index} dynamic={self.dynamic} train={self.train}"]
        for i in self.inputs:
            heads.append(f"# {i.name}: shapes {[tuple(s) for s in i.shapes]} {str(i.dtype)[6:]} {i.layout_name()} "
                         f"values [{i.lo}, {i.hi}]{' requires_grad' if i.requires_grad else ''}")
        return "\n".join(heads) + "\n" + self.source()


def cast(v, dtype):
    return v.to(dtype)


def namespace(reference=False) -> dict:
    """Globals the program text runs in; the reference widens every float cast to float64 after rounding."""
    ns = {"torch": torch, "F": torch.nn.functional, "math": math}
    ns.update({name: dt for dt, name in DTYPE_NAMES.items()})
    if reference:
        def ref_cast(v, dtype):
            v = v.to(dtype)
            return v.to(torch.float64) if dtype.is_floating_point else v
        ns["cast"] = ref_cast
    else:
        ns["cast"] = cast
    return ns



def make_input(spec: InputSpec, call: int, gen: torch.Generator) -> torch.Tensor:
    """A tensor of `spec.shapes[call]` with the spec's memory layout; values uniform in [lo, hi]."""
    shape = list(spec.shapes[call])
    n = len(shape)
    phys = [1 if d in spec.expanded else shape[d] * spec.steps[d] + (1 if spec.steps[d] > 1 else 0)
            for d in range(n)]
    base_shape = [phys[d] for d in spec.perm]
    count = math.prod(base_shape) + spec.offset
    if spec.dtype.is_floating_point:
        flat = torch.rand(count, generator=gen, dtype=torch.float64) * (spec.hi - spec.lo) + spec.lo
    elif spec.dtype == torch.bool:
        flat = torch.rand(count, generator=gen) < 0.5
    else:
        flat = torch.randint(int(spec.lo), int(spec.hi) + 1, (count,), generator=gen, dtype=torch.int64)
    flat = flat.to(spec.dtype)
    base = flat[spec.offset:].view(base_shape)
    inverse = [spec.perm.index(d) for d in range(n)]
    x = base.permute(inverse)
    for d in range(n):
        if d not in spec.expanded and spec.steps[d] > 1:
            x = x.narrow(d, 1, shape[d] * spec.steps[d] - 1 if shape[d] else 0)[(slice(None),) * d + (slice(None, None, spec.steps[d]),)]
    x = x.expand(shape)
    assert list(x.shape) == shape, (x.shape, shape)
    return x.detach().requires_grad_(spec.requires_grad)
