"""The C++ loops of a reduction with few outer points (a full reduction to a scalar, a handful of rows): the
outer points run in order and each reduction phase is split over threads along ``r0``; per-thread partials are
combined in thread order afterwards (deterministic, argmax keeps the first occurrence, float sums pairwise).
A mixin of `render.KernelRenderer`, like `tiled.TiledLoops`."""
from __future__ import annotations

from fuse_all_ir.program import Reduce
from fuse_all_ir.vocabulary import is_float, is_positional

from . import rules
from .choices import numel as _numel
from .index_printer import c_name, cpp_index


def _value(name: str) -> str:
    return "v_" + c_name(name)


def is_float_sum(r: Reduce) -> bool:
    return r.op == "sum" and is_float(r.dtype)


class ThreadSplitLoops:
    def split_reduction(self) -> None:
        """Few outer points: run them in order and split each reduction phase over threads along r0."""
        k = self.k
        n = len(k.outer)
        self.outer_loops(n, None)
        if n == 0:
            self.open()
        clause = self.parallel_clause(_numel(k.reduction))
        clause = " if(parallel: 0)" if clause is None else clause
        for loop in k.loops:
            if not loop.over_reduction:
                for stmt in loop.body:
                    self.statement(stmt)
                continue
            reduces = [s for s in loop.body if isinstance(s, Reduce)]
            self.declare_accumulators(reduces)
            self.open(comment="split over threads along r0")
            self.emit("const int64_t fa_max_threads = omp_get_max_threads();")
            self.emit("int64_t fa_used = 1;")
            for r in reduces:
                part_type = rules.compute_type(self.dtypes[r.arg] if is_positional(r.op) else r.dtype)
                self.emit(f"{part_type} fa_part_{_value(r.name)}[fa_max_threads];")
                if is_positional(r.op):
                    self.emit(f"int64_t fa_part_idx_{_value(r.name)}[fa_max_threads];")
            self.emit(f"#pragma omp parallel{clause}")
            self.open()
            # int64 throughout: `length * thread` passes 2**31 long before the length does (2 threads and
            # 2**30 elements; 128 threads and 2**24)
            self.emit("const int64_t fa_t = omp_get_thread_num(), fa_nt = omp_get_num_threads();")
            self.emit("if (fa_t == 0) fa_used = fa_nt;")
            r_len = f"(int64_t)({cpp_index(k.reduction[0])})"
            self.emit(f"const int64_t fa_lo = {r_len} * fa_t / fa_nt, fa_hi = {r_len} * (fa_t + 1) / fa_nt;")
            self.declare_accumulators(reduces)
            self.reduction_loops(loop.body, reduces, ("fa_lo", "fa_hi"))
            for r in reduces:
                acc = _value(r.name)
                if is_positional(r.op):
                    self.emit(f"fa_part_{acc}[fa_t] = {acc}_val; fa_part_idx_{acc}[fa_t] = {acc};")
                else:
                    self.emit(f"fa_part_{acc}[fa_t] = {acc};")
            self.close()
            sums = [r for r in reduces if is_float_sum(r)]
            for r in sums:      # thread partials of float sums are combined pairwise too
                self.emit(f"fa_cascade<{rules.compute_type(r.dtype)}> fa_cs_{_value(r.name)};")
            self.open("for (int64_t fa_t = 0; fa_t < fa_used; ++fa_t)")
            for r in reduces:
                acc, part = _value(r.name), f"fa_part_{_value(r.name)}[fa_t]"
                if is_positional(r.op):
                    idx = f"fa_part_idx_{acc}[fa_t]"
                    self.emit(f"if ({idx} >= 0 && fa_{r.op}_takes({part}, {acc}, {acc}_val)) "
                              f"{{ {acc}_val = {part}; {acc} = {idx}; }}")
                elif r in sums:
                    self.emit(f"fa_cs_{acc}.add({part});")
                else:
                    self.emit(rules.combine(r.op, acc, part, r.dtype))
            self.close()
            for r in sums:
                self.emit(f"{_value(r.name)} = fa_cs_{_value(r.name)}.total();")
            self.close()
        for _ in range(max(n, 1)):
            self.close()
