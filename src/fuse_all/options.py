"""`torch.compile(..., backend="fuse_all", mode=..., options=...)`: what is accepted, checked up front."""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


class OptionError(ValueError):
    pass


@dataclass(frozen=True)
class Options:
    codegen: str = "auto"          # "auto" (the registered target for the device type) | a target's name
    cudagraphs: bool = False       # capture and replay CUDA graphs (mode="reduce-overhead" turns it on)
    autotune: bool = True          # benchmark Triton configs on first launch (else heuristics)
    max_autotune: bool = False     # a wider space of Triton configs (mode="max-autotune..." turns it on)
    fallback: bool = True          # on a compile error run the graph in ATen with a warning (False: raise)
    debug: bool = False            # write the debug folder (also FUSE_ALL_DEBUG=1 / TORCH_COMPILE_DEBUG=1)
    progress: bool | None = None   # progress line: None = FUSE_ALL_PROGRESS decides (auto: terminals only)
    layout_opt: bool | None = None  # channels-last convolutions: None = FUSE_ALL_LAYOUT_OPT decides (default on)
    weight_layout_cache: bool = False  # CPU inference: keep channels-last weight copies while unchanged (opt-in: `.data` writes are not seen)


def _choices(key: str) -> tuple | None:
    if key == "codegen":
        from fuse_all_ir import target_names
        return ("auto", *target_names())
    return None

_OPTIONAL_BOOLS = {"progress", "layout_opt"}


def parse(mode=None, options=None) -> Options:
    if mode not in MODES:
        raise OptionError(f"fuse_all: unknown mode {mode!r}; valid modes: "
                          + ", ".join(repr(m) for m in MODES))
    values = {}
    if mode == "reduce-overhead" or mode == "max-autotune":
        values["cudagraphs"] = True
    if mode in ("max-autotune", "max-autotune-no-cudagraphs"):
        values["max_autotune"] = True
    valid = {f.name: f for f in fields(Options)}
    if options is not None and not isinstance(options, Mapping):
        raise OptionError(f"fuse_all: options must be a dict such as {{'codegen': 'cpp'}}, got "
                          f"{type(options).__name__} {options!r}; valid options: {', '.join(sorted(valid))}")
    for key, value in dict(options or {}).items():
        if key not in valid:
            raise OptionError(f"fuse_all: unknown option {key!r}; valid options: {', '.join(sorted(valid))}")
        expected = bool if key in _OPTIONAL_BOOLS else type(getattr(Options(), key))
        if key in _OPTIONAL_BOOLS and value is None:
            pass
        elif expected is bool and not isinstance(value, bool) or expected is int and (
                isinstance(value, bool) or not isinstance(value, int)) or expected is str and not isinstance(value, str):
            raise OptionError(f"fuse_all: option {key!r} takes a {expected.__name__}, got {value!r}")
        allowed = _choices(key)
        if allowed is not None and value not in allowed:
            raise OptionError(f"fuse_all: option {key!r} must be one of {', '.join(allowed)}; got {value!r}")
        values[key] = value
    return Options(**values)


def resolve_layout_opt(opts: Options, env: Mapping[str, str] | None = None) -> Options:
    """`layout_opt` settled: the option when given, else FUSE_ALL_LAYOUT_OPT (`0`/`false`/`no`/`off`
    turn it off; anything else, or unset, leaves it on). Settled before the cache key is made, so that
    graphs compiled with and without it are never mixed up."""
    if opts.layout_opt is not None:
        return opts
    value = (os.environ if env is None else env).get("FUSE_ALL_LAYOUT_OPT", "").strip().lower()
    return replace(opts, layout_opt=value not in {"0", "false", "no", "off"})
