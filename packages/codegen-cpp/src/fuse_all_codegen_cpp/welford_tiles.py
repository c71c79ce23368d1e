"""One-pass variance in C++ column tiles (channels-last BatchNorm statistics on CPU).

A tiled column reduction walks every row of the input for a tile of columns; the two-pass variance
(`fuse_all_ir.two_pass_form`) would walk them twice, reading the input from memory twice. Here a welford
phase walks the rows in blocks of FA_WELFORD_ROWS (64 rows of the tile: at most 256 KB, in cache): a
first pass over the block sums the values per column, a second pass (from cache) sums the deviations from
the block's mean and their squares, which gives the block's corrected mean m_b and M2_b. Blocks combine by
sums only, each a tree of fan-out 64 like the tiled column sums (fa_tile_flush):
T1 = sum M2_b, T2 = sum n_b m_b, T3 = sum n_b m_b^2; then mean = T2 / n and M2 = T1 + |T3 - T2 mean|
(the values are already shifted by their row's first element, so T3 - T2 mean cancels little).
"""
from __future__ import annotations

from fuse_all_ir.program import Kernel, Reduce, Store
from fuse_all_ir.symbolic import rvar, xvar
from fuse_all_ir.vocabulary import is_welford
from fuse_all_ir.welford import value_slice, welford_groups

from . import rules
from .index_printer import cpp_index

BLOCK_ROWS = 64
# Off: on constant rows of large values (tests/fuzz/test_regressions.py::test_std_var_of_constant_rows_of_
# large_values, the std of an expanded input cubed) the block combine gave 1.6e-9 where eager and the two-pass
# form give exactly 0; until that is understood C++ column tiles take the two-pass form (two walks).
NATIVE_WELFORD_TILES = False


def native_welford_ok(kernel: Kernel) -> bool:
    """The tiled renderer computes the kernel's welford phases itself: one reduction dim, and each
    welford phase holds only unmasked welford reduces and no stores."""
    if not NATIVE_WELFORD_TILES or len(kernel.reduction) != 1:
        return False
    for loop in kernel.loops:
        reduces = [s for s in loop.body if isinstance(s, Reduce)]
        if not any(is_welford(r.op) for r in reduces):
            continue
        if not all(is_welford(r.op) and r.mask is None for r in reduces):
            return False
        if any(isinstance(s, Store) for s in loop.body):
            return False
    return True


class WelfordTiles:
    """Mixin of `KernelRenderer`: `welford_tile_phase` renders one welford phase of a tiled reduction."""

    def _tile_column_loop(self, stmts, lines) -> None:
        n = len(self.k.outer)
        self.emit("#pragma omp simd")
        self.open("for (int64_t fa_j = 0; fa_j < fa_w; ++fa_j)")
        self.emit(f"const int64_t {xvar(n - 1)} = fa_x + fa_j;")
        for stmt in stmts:
            self.statement(stmt)
        for line in lines:
            self.emit(line)
        self.close()

    def _per_column(self, lines) -> None:
        self.emit("#pragma omp simd")
        self.open("for (int64_t fa_j = 0; fa_j < fa_w; ++fa_j)")
        for line in lines:
            self.emit(line)
        self.close()

    def welford_tile_phase(self, loop, max_tile) -> None:
        groups = welford_groups(loop.body)
        plain = [s for s in loop.body if not isinstance(s, Reduce)]
        again = value_slice(loop.body, {arg for arg, _ in groups})
        rows = cpp_index(self.k.reduction[0])
        names = []
        self.open(comment=f"one-pass variance: blocks of {BLOCK_ROWS} rows read twice from cache, "
                          "blocks combined by trees of sums")
        for g, ((arg, _), reduces) in enumerate(groups.items()):
            t = rules.compute_type(next(iter(reduces.values())).dtype)
            p = f"fa_wf{g}"
            names.append((p, t, self.ref(arg), reduces))
            self.emit(f"{t} {p}_bs[{max_tile}], {p}_bm[{max_tile}], {p}_bd[{max_tile}], {p}_bq[{max_tile}];")
            for total in ("t1", "t2", "t3"):
                self.emit(f"{t} {p}_{total}[{max_tile}]; {t} {p}_{total}_lv[FA_TILE_LEVELS - 1][{max_tile}];")
        self._per_column([f"{p}_{total}[fa_j] = 0;" for p, *_ in names for total in ("t1", "t2", "t3")])
        self.open("for (int fa_k = 0; fa_k < FA_TILE_LEVELS - 1; ++fa_k)")
        self._per_column([f"{p}_{total}_lv[fa_k][fa_j] = 0;" for p, *_ in names for total in ("t1", "t2", "t3")])
        self.close()
        self.emit("int64_t fa_blocks = 0;")
        self.open(f"for (int64_t fa_rb = 0; fa_rb < {rows}; fa_rb += {BLOCK_ROWS})")
        self.emit(f"const int64_t fa_re = ({rows}) - fa_rb < {BLOCK_ROWS} ? ({rows}) : fa_rb + {BLOCK_ROWS};")
        self._per_column([f"{p}_bs[fa_j] = 0;" for p, *_ in names])
        r = rvar(0)
        self.open(f"for (int64_t {r} = fa_rb; {r} < fa_re; ++{r})")
        self._tile_column_loop(plain, [f"{p}_bs[fa_j] = {p}_bs[fa_j] + {x};" for p, _, x, _ in names])
        self.close()
        lines = []
        for p, t, _, _ in names:
            lines += [f"{p}_bm[fa_j] = {p}_bs[fa_j] / ({t})(fa_re - fa_rb);", f"{p}_bd[fa_j] = 0;",
                      f"{p}_bq[fa_j] = 0;"]
        self._per_column(lines)
        self.open(f"for (int64_t {r} = fa_rb; {r} < fa_re; ++{r})")
        lines = []
        for g, (p, t, x, _) in enumerate(names):
            lines += [f"const {t} fa_c{g} = {x} - {p}_bm[fa_j];", f"{p}_bd[fa_j] = {p}_bd[fa_j] + fa_c{g};",
                      f"{p}_bq[fa_j] = {p}_bq[fa_j] + fa_c{g} * fa_c{g};"]
        self._tile_column_loop(again, lines)
        self.close()
        lines = []
        for g, (p, t, _, _) in enumerate(names):
            nb = f"(({t})(fa_re - fa_rb))"
            lines += [f"const {t} fa_shift{g} = {p}_bd[fa_j] / {nb};",
                      f"const {t} fa_mean{g} = {p}_bm[fa_j] + fa_shift{g};",
                      f"const {t} fa_m2_{g} = {p}_bq[fa_j] - {p}_bd[fa_j] * fa_shift{g};",
                      f"{p}_t1[fa_j] = {p}_t1[fa_j] + (fa_m2_{g} < 0 ? -fa_m2_{g} : fa_m2_{g});",
                      f"{p}_t2[fa_j] = {p}_t2[fa_j] + {nb} * fa_mean{g};",
                      f"{p}_t3[fa_j] = {p}_t3[fa_j] + {nb} * fa_mean{g} * fa_mean{g};"]
        self._per_column(lines)
        self.open("if ((++fa_blocks & ((1 << FA_TILE_LEVEL_BITS) - 1)) == 0)")
        for p, *_ in names:
            for total in ("t1", "t2", "t3"):
                self.emit(f"fa_tile_flush({p}_{total}, {p}_{total}_lv[0], {max_tile}, fa_w, fa_blocks);")
        self.close()
        self.close()
        for p, *_ in names:
            for total in ("t1", "t2", "t3"):
                self.emit(f"fa_tile_total({p}_{total}, {p}_{total}_lv[0], {max_tile}, fa_w);")
        lines = []
        for g, (p, t, _, reduces) in enumerate(names):
            mean = self.ref(reduces["welford_mean"].name) if "welford_mean" in reduces else f"const {t} fa_wmean{g}"
            lines.append(f"{mean} = {p}_t2[fa_j] / ({t})({rows});")
            if "welford_m2" in reduces:
                mean_value = mean.removeprefix(f"const {t} ")
                diff = f"({p}_t3[fa_j] - {p}_t2[fa_j] * {mean_value})"
                lines.append(f"{self.ref(reduces['welford_m2'].name)} = {p}_t1[fa_j] + "
                             f"({diff} < 0 ? -{diff} : {diff});")
        self._per_column(lines)
        self.close()
