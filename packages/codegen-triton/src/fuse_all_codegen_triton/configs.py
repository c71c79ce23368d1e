"""Launch configurations (XBLOCK, YBLOCK, RBLOCK, num_warps, num_stages) per kernel kind, and the grid.

Each function returns candidates, the heuristic's pick first. Heuristic-only mode launches the first one;
autotuning benchmarks them all on the first call. The lists are short on purpose: every candidate is one
more Triton compile, and compile time is a headline metric. Small kernels get a single candidate (they
are launch-bound: no config beats another by more than noise).
"""
from __future__ import annotations

from .indexing import next_power_of_2

# Enough programs to fill an H100/H200 (132 SMs) a couple of times over.
MIN_PROGRAMS = 264
LATENCY_BOUND_PROGRAMS = 132     # fewer programs than SMs: the kernel takes as long as one program
MAX_PERSISTENT_ELEMENTS = 8192   # X * R values a persistent program keeps live per value
ROW_TILE = 4096                  # elements a reduction program aims to work on at once
COLUMN_SECTOR = 8                # float32 columns in one 32-byte memory sector
BIG_POINTWISE = 1 << 21          # below this many elements kernels are launch-bound: no autotuning
HUGE_POINTWISE = 1 << 24         # from here pointwise kernels also try 4096/8192-element blocks


def _cfg(xblock, rblock, warps, stages=1) -> dict:
    cfg = {"XBLOCK": int(xblock)}
    if rblock is not None:
        cfg["RBLOCK"] = int(rblock)
    cfg.update(num_warps=int(warps), num_stages=int(stages))
    return cfg


def _dedupe(configs: list[dict]) -> list[dict]:
    out = []
    for c in configs:
        if c not in out:
            out.append(c)
    return out


def small_pointwise_config(xnumel: int) -> dict:
    """A launch-bound pointwise kernel (bert 1x12's are 9216 or 36864 elements): latency, not bandwidth.
    Inductor's untuned rule: blocks of (elements // 128) clamped to 256..1024, so about 128 programs
    (one per SM) share the work, 4 warps from 128 elements up (it keeps 4 as a workaround for a PTX
    issue, pytorch#97950), 1 below. On the H200, cos->sin over 1e4 floats took 1.49 us of device time as
    our earlier 10 programs x 1024 elements, 0.97 us as Inductor's 40 x 256 (bench/RESULTS.md)."""
    if xnumel <= 256:
        block = max(16, next_power_of_2(xnumel))
        return _cfg(block, None, 4 if block >= 128 else 1)
    return _cfg(max(256, min(1024, next_power_of_2(xnumel) // 128)), None, 4)


def pointwise_configs(xnumel: int, max_autotune: bool = False, dynamic: bool = False) -> list[dict]:
    """`xnumel`: the (hinted) element count; `dynamic`: the kernel runs on other sizes too, so a small
    hint past 512 elements keeps the general 1024-element block (small blocks cost bandwidth on big
    tensors)."""
    if xnumel <= 512 or (xnumel < BIG_POINTWISE and not max_autotune and not dynamic):
        return [small_pointwise_config(xnumel)]
    if xnumel < BIG_POINTWISE and max_autotune and not dynamic:
        # launch-bound sizes: the pick, Inductor's two (1024 x 4 warps, 512 x 8) and more, smaller programs
        smaller = [_cfg(1024, None, 4), _cfg(512, None, 8), _cfg(512, None, 4), _cfg(256, None, 4), _cfg(256, None, 2)]
        return _dedupe([small_pointwise_config(xnumel)] + [c for c in smaller if c["XBLOCK"] < xnumel])
    if xnumel < BIG_POINTWISE and not max_autotune:
        return [_cfg(1024, None, 4)]
    # Streaming kernels: 8-16 elements per thread keeps enough 16-byte loads in flight.
    configs = [_cfg(1024, None, 4), _cfg(2048, None, 8)]
    if xnumel >= HUGE_POINTWISE or max_autotune:
        # Very large streams: bigger blocks (fewer programs, more bytes in flight per SM) get closer to the
        # copy ceiling; two extra compiles, for kernels that run for a millisecond or more.
        configs += [_cfg(4096, None, 8), _cfg(8192, None, 16)]
    if max_autotune:
        configs += [_cfg(512, None, 4), _cfg(4096, None, 16), _cfg(8192, None, 8)]
    return _dedupe(configs)


def _xblock_for(xnumel: int, per_row: int, cap: int) -> int:
    """The largest power-of-two XBLOCK <= cap with XBLOCK rows of `per_row` about a ROW_TILE, that still
    leaves MIN_PROGRAMS programs (or 1 when there are few rows)."""
    x = max(1, min(cap, ROW_TILE // max(1, per_row), next_power_of_2(xnumel)))
    while x > 1 and (xnumel + x - 1) // x < MIN_PROGRAMS:
        x //= 2
    return x


def _warps_for(elements: int, lo: int = 2, hi: int = 16) -> int:
    """About 8 elements (two 16-byte fp32 loads) per thread."""
    return max(lo, min(hi, next_power_of_2(max(1, elements // 256))))


def _reduction_warps(elements: int, lo: int = 2, hi: int = 16) -> int:
    """About 16 elements per thread for a persistent tile: fewer warps than a streaming kernel, as every
    reduction of the tile crosses warps through shared memory (what Inductor does too)."""
    return max(lo, min(hi, next_power_of_2(max(1, elements // 512))))


def persistent_configs(xnumel: int, rnumel: int, inner_contiguous: bool, max_autotune: bool = False) -> list:
    r = next_power_of_2(max(rnumel, 1))
    big = xnumel * rnumel >= BIG_POINTWISE
    if not inner_contiguous:
        # A column reduction wants many columns side by side (coalescing runs along x): as many as registers
        # allow while that still leaves MIN_PROGRAMS programs, never fewer than one 32-byte sector's worth.
        # Few columns (a split reduction's final combine: 512 channels x 64 partials) stay spread over
        # many programs: one 64-column tile per program left 8 programs for the H200's 132 SMs, 13.4 us
        # against Inductor's 4.4 us for the same combine (train_resnet50, profile_kernels --regions).
        x = max(_xblock_for(xnumel, r, 64), min(COLUMN_SECTOR, next_power_of_2(xnumel)))
        wide = min(64, next_power_of_2(xnumel), max(1, MAX_PERSISTENT_ELEMENTS // r))
        if -(-xnumel // wide) >= MIN_PROGRAMS:
            x = max(x, wide)
        warps = _warps_for(x * r)
        configs = [_cfg(x, r, warps)]
        if x * r >= 2048 and big:
            configs.append(_cfg(x, r, warps * 2 if warps < 16 else warps // 2))
        if max_autotune:
            configs += [_cfg(max(1, x // 2), r, max(1, warps // 2)), _cfg(x * 2, r, min(16, warps * 2)),
                        _cfg(x, r, max(1, warps // 2))]
        return _dedupe([configs[0]] + [c for c in configs[1:] if c["XBLOCK"] * r <= 2 * MAX_PERSISTENT_ELEMENTS])
    # A row-contiguous reduction: rows side by side, each a coalesced read. Measured on the H200 (layer norm
    # + gelu over 4096 x 768): 1-4 rows per program with 2-8 warps are within noise of each other (17-18 us),
    # 8+ rows or 16 warps on a 4096-element tile are 10-30% slower; so: the ROW_TILE tile, the same tile with
    # half the warps, and one row per program with ~8 elements per thread (Inductor's pick).
    x = _xblock_for(xnumel, r, 64)
    warps = _reduction_warps(x * r)
    if not big and -(-xnumel // x) < LATENCY_BOUND_PROGRAMS:
        # fewer programs than SMs (bert 1x12's LayerNorm: 12 rows of 768): each program's latency is the
        # kernel's, so spread its row over more threads, as Inductor does (RBLOCK // 128 warps: 8 for 768
        # and 1024); 2 warps left this LayerNorm at 2.7 us against Inductor's 1.5 us on the H200
        warps = max(1, min(8, r // 128))
    configs = [_cfg(x, r, warps)]
    if big:
        configs += [_cfg(x, r, max(1, warps // 2)), _cfg(1, r, _warps_for(r, 1, 8))]
        if x == 1:   # long rows (softmax over 4096): also more warps on the one row
            configs.append(_cfg(1, r, min(16, warps * 2)))
    if max_autotune:
        configs += [_cfg(max(1, x // 2), r, _reduction_warps(max(1, x // 2) * r)),
                    _cfg(_xblock_for_tile(xnumel, r, 2 * ROW_TILE), r, 8), _cfg(x, r, min(16, warps * 2))]
    return _dedupe([c for c in configs if c is configs[0] or c["XBLOCK"] * r <= 2 * MAX_PERSISTENT_ELEMENTS])


def _xblock_for_tile(xnumel: int, per_row: int, tile: int) -> int:
    x = max(1, min(64, tile // max(1, per_row), next_power_of_2(xnumel)))
    while x > 1 and (xnumel + x - 1) // x < MIN_PROGRAMS:
        x //= 2
    return x


def looped_configs(xnumel: int, rnumel: int, inner_contiguous: bool, max_autotune: bool = False,
                   rblock: int | None = None) -> list:
    if inner_contiguous:
        r = rblock or min(2048, next_power_of_2(rnumel))
        x = _xblock_for(xnumel, r, max(1, 2048 // r))
        configs = [_cfg(x, r, _warps_for(x * r, 4, 8))]
        if rblock is None and rnumel >= 4096 and xnumel * rnumel >= BIG_POINTWISE:
            configs.append(_cfg(1, 4096, 16 if x * r >= 4096 else 8))
        if max_autotune and rblock is None:
            configs += [_cfg(1, 1024, 4), _cfg(1, 2048, 16), _cfg(2, 1024, 8), _cfg(x, r, 8, 2)]
    else:
        r = rblock or min(16, next_power_of_2(rnumel))
        x = max(1, min(128, next_power_of_2(xnumel)))
        configs = [_cfg(x, r, _warps_for(x * r, 2, 8))]
        if rblock is None and xnumel * rnumel >= BIG_POINTWISE:
            configs.append(_cfg(max(1, x // 2), min(64, r * 2), _warps_for(x * r, 2, 8)))
        if max_autotune and rblock is None:
            configs += [_cfg(min(256, x * 2), max(1, r // 2), 8), _cfg(x, r, 4, 2)]
    return _dedupe(configs)


# The block sizes a kernel takes as `tl.constexpr` parameters, in parameter order (each only if its
# configs have it: XBLOCK always, YBLOCK for 2-D tiles, RBLOCK for reductions).
BLOCK_NAMES = ("XBLOCK", "YBLOCK", "RBLOCK")


def block_constants(config: dict) -> list[int]:
    return [config[name] for name in BLOCK_NAMES if name in config]


def default_grid(xnumel: str) -> str:
    """The grid of a 1-D launch over `xnumel` points (a Python expression over the size arguments), as a
    template for `grid_source`."""
    return f"(({xnumel}) + {{XBLOCK}} - 1) // {{XBLOCK}}"


def grid_source(spec: dict, config: dict) -> str:
    """The number of programs for `config`: a Python expression over the kernel's size arguments."""
    template = spec.get("grid") or default_grid(spec["xnumel"])
    return template.format(**{name: config.get(name, 1) for name in BLOCK_NAMES})


def tiled_configs(ynumel: int, xnumel: int, max_autotune: bool = False) -> list[dict]:
    """2-D tiles (YBLOCK x XBLOCK) of a transpose-tiled pointwise kernel. Each side of a 32 x 32 float32
    tile is 128 bytes per row or column: one full memory transaction per warp-row on both the loads that
    walk y and the stores that walk x (Inductor's first 2-D tile too); larger tiles keep more bytes in
    flight per program on big tensors. A dim known to be short gives its share to the other."""
    def fit(block_y, block_x):
        y = max(1, min(block_y, next_power_of_2(ynumel)))
        x = max(1, min(block_x * block_y // y, next_power_of_2(xnumel)))
        y = max(1, min(block_y * block_x // x, next_power_of_2(ynumel)))
        return y, x

    def cfg(block_y, block_x, warps):
        y, x = fit(block_y, block_x)
        return {"XBLOCK": int(x), "YBLOCK": int(y), "num_warps": int(warps), "num_stages": 1}

    n = ynumel * xnumel
    if n < BIG_POINTWISE and not max_autotune:
        return [cfg(32, 32, 4)]
    configs = [cfg(64, 64, 8), cfg(32, 32, 4), cfg(64, 32, 4), cfg(32, 64, 4)]
    if n >= HUGE_POINTWISE or max_autotune:
        configs += [cfg(128, 64, 8), cfg(64, 128, 8)]
    if max_autotune:
        configs += [cfg(16, 256, 8), cfg(256, 16, 8), cfg(128, 128, 16)]
    return _dedupe(configs)


def column_configs(xnumel: int, rnumel: int, max_autotune: bool = False, rblock: int | None = None) -> list:
    """Looped column reductions (`TilePlan` "column": the contiguous dim is x): XBLOCK columns side by side
    (the coalesced dim; Triton's layout puts the contiguous axis across lanes), RBLOCK rows per step. At
    least 16 columns (64 bytes of float32 per row: two full sectors), fewer columns and more rows per step
    while that leaves too few programs to fill the GPU."""
    r = rblock or min(64, next_power_of_2(rnumel))
    x = max(1, min(64, next_power_of_2(xnumel)))
    while x > 16 and (xnumel + x - 1) // x < 2 * MIN_PROGRAMS:
        x //= 2
    configs = [_cfg(x, r, _warps_for(x * r, 2, 8))]
    if rblock is None and xnumel * rnumel >= BIG_POINTWISE:
        if xnumel >= 64 * MIN_PROGRAMS:
            # Inductor's outer-reduction tile: 64 columns x 8 rows a step, 4 warps; few registers per
            # accumulator, so a Welford of two BatchNorms (six accumulators) still keeps many programs per SM
            configs.append(_cfg(64, min(8, r), 4))
        configs += [_cfg(x, max(1, min(r * 2, next_power_of_2(rnumel))), 8),
                    _cfg(max(1, min(x * 2, next_power_of_2(xnumel))), max(1, r // 2), 4)]
        if x > 16:
            configs.append(_cfg(max(16, x // 2), min(128, next_power_of_2(rnumel)), 8))
        if x == 64 and xnumel >= 128 * MIN_PROGRAMS:
            # many columns (a split column sum: chunks x 8192 columns): 512-byte rows per step
            configs.append(_cfg(128, min(64, r), 8))
    if max_autotune and rblock is None:
        configs += [_cfg(min(128, next_power_of_2(xnumel)), max(1, r // 4), 8), _cfg(x, r, 4, 2)]
    return _dedupe(configs)
