"""The memory plan of a host program: a buffer allocated for a kernel takes over the memory of a buffer
that died before it (`Alloc(buffer, reuse=...)`), as Inductor's wrapper does (`buf5 = buf2; del buf2  #
reuse`), so the call path allocates less. Shared by every target: it rewrites `Program.steps`.

Scheduling gives each buffer a lifetime: written by a kernel (after its `Alloc`) or returned by an ATen
call, dropped by `Free` after its last reader. Walking the steps in order, a freed buffer joins a pool,
and a later `Alloc` of the same dtype takes one from it instead of allocating:

* the same size and stride: the buffer is simply renamed (`buf5 = buf2`);
* another layout over the same number of elements: `reinterpret_tensor` of the donor, only for donors
  whose memory the host program allocated itself (an ATen result may sit at an offset in a larger
  storage); the donor's Free step is dropped, the reusing Alloc ends its life.

In place (Inductor's `can_inplace`): an output of a kernel takes the memory of one of the kernel's own
inputs that dies with it (its Free follows the kernel) when the layouts are the same and the kernel reads
that input only at the element it writes, before writing it (`in_place.py` says exactly when; the kernel
is rewritten to read the input through the output). Conv+BatchNorm+ReLU in inference, residual adds:
the output stays in the cache lines its input just filled. Tried before the pool, as Inductor does.

A buffer never gives its memory away when it is a graph input or output (saved tensors of a training
forward are outputs), or when an ATen call may have returned a view of it (the view could still be
live), or when it is such a view itself, or when it is an ATen result on another device (`x.cpu()` in a
CUDA graph). A graph output only takes memory the host program allocated
with exactly its layout, so what the caller receives is indistinguishable from a fresh allocation.
"""
from __future__ import annotations

import functools

import sympy

from . import in_place
from .program import Alloc, BufferRef, ExternCall, Free, KernelCall, Program, TensorSpec
from .symbolic import sizes_equal


def storage_elements(spec: TensorSpec) -> sympy.Expr:
    """Elements an allocation of `spec` spans (0 for an empty tensor)."""
    try:
        return _storage_elements_memo(spec)
    except TypeError:      # a spec holding a list: unhashable
        return _storage_elements(spec)


@functools.lru_cache(maxsize=1 << 14)   # the pool is searched at every allocation, the same specs each time
def _storage_elements_memo(spec: TensorSpec) -> sympy.Expr:
    return _storage_elements(spec)


def _storage_elements(spec: TensorSpec) -> sympy.Expr:
    size = [sympy.sympify(n) for n in spec.size]
    if any(n == 0 for n in size):
        return sympy.Integer(0)
    return sympy.expand(1 + sum((n - 1) * sympy.sympify(st) for n, st in zip(size, spec.stride)))


def _schema(target):
    import torch

    op = target
    if isinstance(target, str):
        op = torch.ops
        try:
            for part in target.split("."):
                op = getattr(op, part)
        except (AttributeError, RuntimeError):
            return None
    return getattr(op, "_schema", None)


def extern_may_alias(target) -> bool:
    """Whether an ATen call may return a view of (or write into) one of its arguments, by the op's schema;
    True when the schema cannot be found."""
    schema = _schema(target)
    if schema is None:
        return True
    return (any(r.alias_info is not None for r in schema.returns)
            or any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments))


def extern_writes(target) -> bool:
    """Whether an ATen call may write into one of its arguments (True when the schema cannot be found)."""
    schema = _schema(target)
    return schema is None or any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)


def buffer_specs(program: Program) -> dict[str, TensorSpec]:
    """The layout of every intermediate: allocated buffers and ATen results (with a known layout)."""
    specs = {}
    for step in program.steps:
        if isinstance(step, ExternCall):
            specs.update((n, s) for n, s in zip(step.outputs, step.out_specs) if n is not None and s is not None)
    specs.update(program.buffers)
    return specs


def same_layout(a: TensorSpec, b: TensorSpec) -> bool:
    return (len(a.size) == len(b.size)
            and all(sizes_equal(x, y) for x, y in zip(a.size, b.size))
            and all(sizes_equal(x, y) for x, y in zip(a.stride, b.stride)))


def unshareable(program: Program) -> set[str]:
    """Buffers that never give their memory away: graph inputs and outputs, anything an ATen call may
    have returned a view of (and those views), ATen results of unknown layout."""
    no_donor = {ref.name for ref in buffer_refs(program.outputs)} | {i.name for i in program.inputs}
    no_donor |= set(program.constants)
    for step in program.steps:
        if isinstance(step, ExternCall):
            if extern_may_alias(step.target):
                no_donor.update(ref.name for ref in buffer_refs((step.args, step.kwargs)))
                no_donor.update(o for o in step.outputs if o is not None)
            no_donor.update(name for name, spec in zip(step.outputs, step.out_specs)
                            if name is not None and spec is None)
    return no_donor


def plan_reuse(program: Program) -> Program:
    """Rewrite `program.steps` so that allocations reuse dead buffers, and kernels write outputs in place
    of inputs that die with them (see the module docstring)."""
    outputs = {ref.name for ref in buffer_refs(program.outputs)}
    no_donor = unshareable(program)
    specs = buffer_specs(program)

    def may_donate(name: str) -> bool:
        spec = specs.get(name)
        return (name not in no_donor and spec is not None and spec.device == program.device
                and storage_elements(spec) != 0)

    own: set[str] = set()          # buffers whose storage the host program allocated (exactly sized)
    pool: list[tuple[str, TensorSpec]] = []     # freed donors, most recent last
    taken: dict[str, str] = {}     # donor -> the buffer that reuses it
    steps = []
    for position, step in enumerate(program.steps):
        if isinstance(step, Alloc) and step.reuse is None and step.zero:
            own.add(step.buffer)   # a scatter-add's zero-filled destination: a fresh allocation
            steps.append(step)
            continue
        if isinstance(step, Alloc) and step.reuse is None:
            spec = program.buffers[step.buffer]
            as_output = step.buffer in outputs
            donor = _in_place_donor(program, position, specs, may_donate, own, as_output)
            if donor is not None:
                taken[donor] = step.buffer
                if donor in own:
                    own.add(step.buffer)
                steps.append(Alloc(step.buffer, reuse=donor, in_place=True))
                continue
            donor = _pick(pool, spec, own, as_output=as_output)
            if donor is not None:
                taken[donor] = step.buffer
                if donor in own:
                    own.add(step.buffer)
                steps.append(Alloc(step.buffer, reuse=donor))
                continue
            own.add(step.buffer)
        elif isinstance(step, Free) and step.buffer not in taken and may_donate(step.buffer):
            pool.append((step.buffer, specs[step.buffer]))
        steps.append(step)
    # a donor's own Free goes: the Alloc that reuses it ends its life
    steps = [s for s in steps if not (isinstance(s, Free) and s.buffer in taken)]
    program.steps = steps
    return program


def kernel_after_allocs(steps, position: int):
    """The step after the run of Alloc steps at `position`: the kernel call they allocate for (or None)."""
    while position < len(steps) and isinstance(steps[position], Alloc):
        position += 1
    if position < len(steps) and isinstance(steps[position], KernelCall):
        return position
    return None


def _in_place_donor(program: Program, position: int, specs: dict[str, TensorSpec], may_donate, own: set[str],
                    as_output: bool) -> str | None:
    """An input of the kernel this Alloc is for that dies with the kernel (freed right after it, or after
    kernels that do not read it), has exactly `spec`'s layout and is read only where the output is written
    (`in_place.refusal`); the kernel is rewritten to read it through the output."""
    steps, buffer = program.steps, program.steps[position].buffer
    spec = program.buffers[buffer]
    call = kernel_after_allocs(steps, position)
    if call is None:
        return None
    kernel = program.kernels[steps[call].kernel]
    if buffer not in kernel.outputs:
        return None
    dying, read_later = set(), set()
    for later in steps[call + 1:]:
        # a split reduction's final kernel runs between its partial kernel and the frees (column_split)
        if isinstance(later, KernelCall):
            read_later.update(program.kernels[later.kernel].inputs)
            continue
        if not isinstance(later, Free):
            break
        dying.add(later.buffer)
    dying -= read_later
    for donor in kernel.inputs:
        donor_spec = specs.get(donor)
        if (donor not in dying or donor in kernel.outputs or not may_donate(donor)
                or donor_spec.dtype != spec.dtype or not same_layout(donor_spec, spec)
                or (as_output and donor not in own)):
            continue
        rewritten = in_place.rewrite(kernel, buffer, donor)
        if in_place.refusal(rewritten, buffer, program.size_hints) is None:
            program.kernels[kernel.name] = rewritten
            return donor
    return None


def _pick(pool, spec: TensorSpec, own: set[str], as_output: bool) -> str | None:
    """The most recently freed donor with spec's exact layout, else (not for an output) one of the host
    program's own allocations over as many elements; removed from the pool."""
    exact = compatible = None
    elements = None
    for index in range(len(pool) - 1, -1, -1):
        name, donor = pool[index]
        if donor.dtype != spec.dtype:
            continue
        if same_layout(donor, spec):
            if as_output and name not in own:
                continue
            exact = index
            break
        if compatible is None and not as_output and name in own:
            elements = storage_elements(spec) if elements is None else elements
            if sizes_equal(storage_elements(donor), elements):
                compatible = index
    index = exact if exact is not None else compatible
    if index is None:
        return None
    return pool.pop(index)[0]


def buffer_refs(value):
    """Every `BufferRef` in `value`: an extern call's (args, kwargs) or a program's outputs, nested in lists,
    tuples and dicts."""
    if isinstance(value, BufferRef):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from buffer_refs(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from buffer_refs(item)
