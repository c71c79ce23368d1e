"""`TritonKernel`: what generated host programs call (``kernel_0_launcher.run(buf0, buf1, s0)``).

Launch overhead matters as much as kernel speed for small graphs, so after the first call `run` is a small
generated function that does only: read the pointers (`data_ptr()`), check they are 16-byte aligned (the
compiled variant assumes it) and that the int32 guard holds, compute the grid, and call Triton's C launcher
with the compiled kernel's handles. No argument binding, no specialisation key, no dict lookups. Anything
unusual (unaligned views, sizes past 2**31, another current device, profiler hooks) takes the general
path, which compiles the needed variant on demand.

Host programs call `run_on(stream, ...)` instead: the program checked once per call that its device is
current and read the current stream (`raw_stream`), so per launch that is one Python frame, one
`data_ptr()` per tensor and the C launch (`run` adds a device check and a stream lookup).

Every compiled variant is checked once, before its first launch, to belong to its kernel's launch
(`pairing_problem`): compiled from this kernel's JIT function, one parameter per argument passed, and
Triton's loaded launcher itself taking that many (Triton 3.6's launchers could be handed another kernel's
C module: `_triton_compat.guard_launcher_loads`). A variant that does not fit is logged as an error and
compiled again for this kernel alone; a launch Triton still refuses moves the kernel to Triton's own
launcher, logged: never a crash of the user's program on our account.

The first call also picks the config (autotuning: `autotune.py`). Under `TRITON_INTERPRET=1` kernels run
through Triton's interpreter with the heuristic config.
"""
from __future__ import annotations

import logging
import threading

import torch

from . import _triton_compat as compat
from . import autotune, configs
from .compiler import VariantKey, compile_variant, submit, wait_all

log = logging.getLogger(__name__)
libdevice = compat.libdevice   # generated kernels call libdevice.<fn>; bound per mode in _triton_compat


class TritonKernel:
    def __init__(self, fn, spec: dict, fn_int64=None, *, autotune_configs: bool = True, device: str = "cuda"):
        self.fn, self.fn_int64, self.spec = fn, fn_int64, spec
        self.name = spec["name"]
        self.configs = spec["configs"]
        self.n_ptr = len(spec["pointers"])
        self.interpret = compat.interpret_mode()
        self.autotune = autotune_configs and not self.interpret and len(self.configs) > 1
        self.device = device
        self.device_index = None
        self.int64_only = spec["size_type"] == "i64"
        sizes = ", ".join(spec["sizes"])
        self._xnumel = eval(f"lambda {sizes}: {spec['xnumel']}")   # noqa: S307 - our own rendered text
        self._rnumel = eval(f"lambda {sizes}: {spec['rnumel']}") if spec["rnumel"] else None  # noqa: S307
        self._grids = [eval(f"lambda {sizes}: {configs.grid_source(spec, c)}")  # noqa: S307 - our own text
                       for c in self.configs]
        guard = spec.get("int32_guard")
        self._int32_ok = eval(f"lambda {sizes}: {guard}") if guard else None  # noqa: S307
        self._futures: dict = {}
        self._compiled: dict = {}
        self._lock = threading.Lock()
        self.chosen: dict | None = None
        self.launch_mismatches: list[str] = []   # pairing bugs seen (logged as errors): see pairing_problem
        self._fast_variant = None                 # the compiled variant the fast launcher calls
        self.timings_ms: list | None = None
        self.run = self._first_run
        self.run_on = self._first_run_on
        if not self.interpret and device.startswith("cuda") and torch.cuda.is_available():
            self.device_index = torch.device(device).index or 0
            candidates = range(len(self.configs)) if self.autotune else [0]
            hints = spec.get("size_hints", {})
            remembered = self._remembered_config(hints)
            if remembered is not None:   # warm start: compile only the config that won last time
                candidates = [remembered]
            div16 = bool(spec["sizes"]) and all(hints.get(s, 1) % 16 == 0 for s in spec["sizes"])
            for i in candidates:
                self._submit(VariantKey(i, self.int64_only, True, div16))

    # ---- compiling ----
    def _fn_for(self, int64: bool):
        return self.fn_int64 if int64 and not self.int64_only and self.fn_int64 is not None else self.fn

    def _submit(self, key: VariantKey):
        if key not in self._futures:
            self._futures[key] = submit(self._fn_for(key.int64), self.spec, key, self.device_index)
        return self._futures[key]

    def compiled(self, key: VariantKey):
        """The compiled variant (waits for the background compile, or compiles now), checked once to belong
        to this kernel's launch: see `_fitting`."""
        found = self._compiled.get(key)
        if found is None:
            found = self._compiled[key] = self._fitting(key, self._submit(key).result(), self.device_index)
        return found

    def _n_params(self, config_index: int) -> int:
        """What every launch passes: pointers, size arguments, block constants."""
        return self.n_ptr + len(self.spec["sizes"]) + len(configs.block_constants(self.configs[config_index]))

    def pairing_problem(self, key: VariantKey, compiled) -> str | None:
        """Why `compiled` cannot be launched with this kernel's arguments, or None. A launcher of another
        signature fails every launch with Triton's "function takes exactly N arguments (M given)"; another
        kernel's binary of the same arity would run the wrong code. So the compiled kernel must come from
        this kernel's JIT function, with one parameter per argument we pass, and Triton's launcher itself
        (not only what we asked for) must take that many."""
        expected_fn, n = self._fn_for(key.int64), self._n_params(key.config)
        src = getattr(compiled.kernel, "src", None)
        fn = getattr(src, "fn", None)
        if fn is not None and fn is not expected_fn:
            return (f"compiled from JIT function {getattr(fn, '__name__', fn)!s} "
                    f"(module {getattr(fn, '__module__', '?')}), not {expected_fn.__name__}")
        signature = getattr(src, "signature", None)
        if signature is not None and len(signature) != n:
            return f"compiled for {len(signature)} parameters ({', '.join(signature)}); the launch passes {n}"
        taken = compat.launcher_param_count(compiled.runner)
        if taken is not None and taken != n:
            return (f"Triton's launcher takes {taken} parameters (its code is in "
                    f"{compat.launcher_library(compiled.runner)}); the launch passes {n}")
        return None

    def _fitting(self, key: VariantKey, compiled, device_index: int):
        """`compiled` if it fits this kernel's launch; otherwise the mismatch is logged as the bug it is and
        the variant compiled again for this kernel alone (not through the compiles it shares; Triton builds
        a new launcher object, loaded through `guard_launcher_loads`); raises LaunchMismatch if that does not
        fit either (`_setup` then uses Triton's own launcher)."""
        problem = self.pairing_problem(key, compiled)
        if problem is None:
            return compiled
        self.launch_mismatches.append(problem)
        log.error("fuse-all: %s: compiled variant %s does not fit this kernel's launch: %s (Triton %s)",
                  self.name, tuple(key), problem, compat.TRITON_VERSION)
        log.error("fuse-all: %s: compiling variant %s again for this kernel alone", self.name, tuple(key))
        again = compile_variant(self._fn_for(key.int64), self.spec, key, device_index)
        problem = self.pairing_problem(key, again)
        if problem is not None:
            self.launch_mismatches.append(problem)
            raise LaunchMismatch(f"{self.name}: variant {tuple(key)} compiled again still does not fit: {problem}")
        return again

    def wait_compiled(self) -> None:
        """Block until the background compiles finish; raises the first compile error."""
        wait_all(list(self._futures.values()))

    # ---- the first call ----
    def _first_run(self, *args):
        with self._lock:
            if self.run == self._first_run:
                self._setup(args)
        return self.run(*args)

    def _first_run_on(self, stream, *args):
        self._first_run(*args)       # sets `run_on` up for the next calls

    def _set_paths(self, run, run_on=None) -> None:
        """`run_on` of a path without a fast launcher, or of a program on another device than CUDA (its
        host program passes no stream): the path finds the stream itself."""
        if run_on is None or not self.device.startswith("cuda"):
            run_on = lambda stream, *args: run(*args)   # noqa: E731
        self.run_on = run_on
        self.run = run

    def _setup(self, args) -> None:
        if self.interpret:
            self.chosen = self.configs[0]
            self._set_paths(self._run_jit)
            return
        tensors = [a for a in args[: self.n_ptr] if isinstance(a, torch.Tensor)]
        if tensors and tensors[0].device.type == "cuda":
            self.device_index = tensors[0].device.index
        elif self.device_index is None:
            self.device_index = torch.cuda.current_device()
        try:
            index = self._choose_config(args)
            self.chosen = self.configs[index]
            self._set_paths(*self._make_fast_launcher(index, args))
        except Exception as e:  # noqa: BLE001 - Triton internals moved: stay correct through triton's JIT
            log.warning("fuse-all: %s: fast Triton launch unavailable (%s: %s); using triton's launcher",
                        self.name, type(e).__name__, e)
            log.debug("fuse-all: %s: why the fast Triton launch failed", self.name, exc_info=True)
            self.chosen = self.configs[0]
            self._set_paths(self._run_jit)

    def _tuning_key(self, sizes) -> str:
        xnumel = self._xnumel(*sizes)
        rnumel = self._rnumel(*sizes) if self._rnumel else None
        return autotune.cache_key(self.spec["source_hash"], self.configs, autotune.size_bucket(xnumel, rnumel),
                                  autotune.device_identity(torch.cuda.get_device_properties(self.device_index)),
                                  compat.TRITON_VERSION, torch.__version__)

    def _remembered_config(self, hints: dict) -> int | None:
        if not self.autotune or any(s not in hints for s in self.spec["sizes"]):
            return None
        cached = autotune.load_choice(self._tuning_key([hints[s] for s in self.spec["sizes"]]))
        return self.configs.index(cached) if cached in self.configs else None

    def _choose_config(self, args) -> int:
        if not self.autotune:
            return 0
        sizes = args[self.n_ptr:]
        xnumel = self._xnumel(*sizes)
        key = self._tuning_key(sizes)
        cached = autotune.load_choice(key)
        if cached in self.configs:
            return self.configs.index(cached)
        if xnumel == 0:
            return 0
        launch_args = self._bench_args(args)
        # (`variants`, not `key`: `key` is the tuning cache key stored below; shadowing it with a
        # VariantKey once made store_choice fail with "can only concatenate tuple (not "str") to tuple")
        variants = [self._variant(i, launch_args[: self.n_ptr], sizes) for i in range(len(self.configs))]
        for variant in variants:   # whatever is missing compiles in parallel
            self._submit(variant)
        launchers = [self._bound_launch(self.compiled(v), v.config, launch_args, sizes) for v in variants]
        with torch.cuda.device(self.device_index):
            times = autotune.benchmark(launchers, torch.cuda.synchronize,
                                       lambda: torch.cuda.Event(enable_timing=True))
        self._scratch = []
        best = min(range(len(times)), key=times.__getitem__)
        self.timings_ms = times
        log.debug("fuse-all: %s autotuned for sizes %s: %s", self.name, tuple(sizes) or f"xnumel={xnumel}",
                  ", ".join(f"{_config_text(c)} {t * 1000:.1f} us{' <-' if i == best else ''}"
                            for i, (c, t) in enumerate(zip(self.configs, times))))
        autotune.store_choice(key, self.configs[best], times)
        return best

    def _bench_args(self, args) -> list:
        """Pointer values for benchmarking: outputs the kernel also reads (in place), or that share memory
        with an input, are redirected to scratch memory, so repeated runs cannot change what is read."""
        ptrs = [a.data_ptr() for a in args[: self.n_ptr]]
        n_in = self.spec["n_inputs"]
        in_storages = {a.untyped_storage().data_ptr() for a in args[:n_in]}
        self._scratch = []
        for j, out in enumerate(args[n_in: self.n_ptr]):
            storage = out.untyped_storage()
            if j in self.spec["mutated"] or storage.data_ptr() in in_storages:
                scratch = torch.empty(storage.nbytes() + 16, dtype=torch.uint8, device=out.device)
                self._scratch.append(scratch)
                ptrs[n_in + j] = scratch.data_ptr() + (out.data_ptr() - storage.data_ptr())
        return ptrs + list(args[self.n_ptr:])

    def _variant(self, config_index: int, ptrs, sizes) -> VariantKey:
        int64 = self.int64_only or (self._int32_ok is not None and not self._int32_ok(*sizes))
        return VariantKey(config_index, int64, all(p % 16 == 0 for p in ptrs),
                          bool(sizes) and all(s % 16 == 0 for s in sizes))

    def _bound_launch(self, compiled, config_index: int, launch_args, sizes):
        grid = self._grids[config_index](*sizes)
        consts = configs.block_constants(self.configs[config_index])
        stream = compat.stream_getter()(self.device_index)
        runner, function, metadata = compiled.runner, compiled.function, compiled.metadata

        def launch():
            runner(grid, 1, 1, stream, function, metadata, None, None, None, *launch_args, *consts)
        return launch

    # ---- launching ----
    def _make_fast_launcher(self, index: int, first_args):
        """Generate the per-call launchers `run` and `run_on` for config `index`: aligned pointers, the
        default index dtype, and size arguments divisible by 16 if they were on the first call."""
        enter, exit_ = compat.launch_hooks()
        if enter is not None or exit_ is not None:
            return self._run_general, None
        sizes = list(first_args[self.n_ptr:])
        div16 = bool(sizes) and all(v % 16 == 0 for v in sizes)
        compiled = self._fast_variant = self.compiled(VariantKey(index, self.int64_only, True, div16))
        direct = compat.direct_launch(compiled.runner)
        source = fast_launcher_source(self.spec, self.configs[index], self.device_index, div16,
                                      self._int32_ok is not None and not self.int64_only,
                                      direct[1] if direct is not None else None)
        scope = {"runner": compiled.runner, "function": compiled.function, "metadata": compiled.metadata,
                 "get_stream": compat.stream_getter(), "get_device": compat.current_device_getter(),
                 "general": self._run_general, "refused": self._launch_refused}
        if direct is not None:
            scope["launch"] = direct[0]
        exec(source, scope)   # noqa: S102 - generated from our own spec
        self.launcher_source = source
        return scope["run"], scope["run_on"]

    def _launch_refused(self, error: TypeError, *args):
        """The fast launcher's C launch raised TypeError: Triton parses the whole argument tuple before it
        launches anything, so nothing ran. A launcher that does not fit its arguments is a bug (ours, or a
        launcher module mixed up on loading: `_triton_compat.guard_launcher_loads`): logged as an error with what was paired, then this kernel uses Triton's own
        `fn[grid](...)` launcher, this call included. An error that launcher raises too is the caller's."""
        taken = compat.launcher_param_count(self._fast_variant.runner)
        problem = (f"Triton's launcher refused the launch ({error}); it takes {taken} parameters, the launch "
                   f"passes {self._n_params(self.configs.index(self.chosen))}")
        self.launch_mismatches.append(problem)
        log.error("fuse-all: %s: %s; launching through Triton's own launcher from now on", self.name, problem)
        self._set_paths(self._run_jit)
        return self._run_jit(*args)

    def _run_general(self, *args):
        sizes = args[self.n_ptr:]
        xnumel = self._xnumel(*sizes)
        if xnumel <= 0:
            return
        ptrs = [a.data_ptr() for a in args[: self.n_ptr]]
        key = self._variant(self.configs.index(self.chosen), ptrs, sizes)
        tensors = [a for a in args[: self.n_ptr] if isinstance(a, torch.Tensor)]
        device = tensors[0].device.index if tensors else self.device_index
        with torch.cuda.device(device):
            try:
                compiled = self._variant_on(key, device)
            except LaunchMismatch as error:    # logged as an error already
                log.warning("fuse-all: %s; using triton's launcher", error)
                self._set_paths(self._run_jit)
                return self._run_jit(*args)
            grid = (self._grids[key.config](*sizes), 1, 1)
            consts = configs.block_constants(self.chosen)
            stream = compat.stream_getter()(device)
            enter, exit_ = compat.launch_hooks()
            meta = compiled.kernel.launch_metadata(grid, stream, *ptrs, *sizes, *consts) if enter else None
            compiled.runner(*grid, stream, compiled.function, compiled.metadata, meta, enter, exit_,
                            *ptrs, *sizes, *consts)

    def _variant_on(self, key: VariantKey, device: int):
        if device == self.device_index:
            return self.compiled(key)
        compiled = self._compiled.get((key, device))    # a second device: its own loaded copy
        if compiled is None:
            compiled = self._compiled[(key, device)] = self._fitting(
                key, compile_variant(self._fn_for(key.int64), self.spec, key, device), device)
        return compiled

    def _run_jit(self, *args):
        """Triton's own `fn[grid](...)` launcher: the interpreter's way, and the fallback (slower per call)
        if our fast path cannot be built."""
        sizes = args[self.n_ptr:]
        xnumel = self._xnumel(*sizes)
        if xnumel <= 0:
            return
        config = self.chosen
        int64 = self.int64_only or (self._int32_ok is not None and not self._int32_ok(*sizes))
        grid = (self._grids[self.configs.index(config)](*sizes),)
        options = {k: config[k] for k in configs.BLOCK_NAMES if k in config}
        if not self.interpret:   # the interpreter takes no compile options
            options.update(num_warps=config["num_warps"], num_stages=config.get("num_stages", 1),
                           enable_fp_fusion=self.spec.get("fp_fusion", True))
        self._fn_for(int64)[grid](*args, **options)

    def __repr__(self):
        return f"TritonKernel({self.name}, chosen={self.chosen})"


def _config_text(config: dict) -> str:
    """XBLOCK=64,RBLOCK=64,w16,s1: a launch config in one short word, for the autotuning log line."""
    words = [f"{k}={v}" for k, v in config.items() if k.endswith("BLOCK")]
    words += [f"{prefix}{config[k]}" for prefix, k in (("w", "num_warps"), ("s", "num_stages")) if k in config]
    return ",".join(words)


class LaunchMismatch(RuntimeError):
    """A compiled variant whose launcher does not take this kernel's arguments (TritonKernel.pairing_problem)."""


# device index -> the current raw CUDA stream (what `run_on` takes); host programs read it once per call
raw_stream = compat.stream_getter()


def fast_launcher_source(spec: dict, config: dict, device_index: int, div16: bool, check_guard: bool,
                         direct_extra: tuple | None = None) -> str:
    """Python source of the per-call launchers (see the module docstring): `run(*args)` and, for host
    programs that know their device is current, `run_on(stream, *args)`. The fast path's only checks are
    the ones the compiled variant's promises need."""
    return (_launcher_source("run", spec, config, device_index, div16, check_guard, direct_extra) + "\n\n"
            + _launcher_source("run_on", spec, config, device_index, div16, check_guard, direct_extra))


def _launcher_source(name: str, spec: dict, config: dict, device_index: int, div16: bool, check_guard: bool,
                     direct_extra: tuple | None) -> str:
    on_stream = name == "run_on"
    n_ptr = len(spec["pointers"])
    ptrs = [f"a{i}" for i in range(n_ptr)]
    sizes = list(spec["sizes"])
    consts = [str(c) for c in configs.block_constants(config)]
    lines = [f"def {name}({', '.join((['stream'] if on_stream else []) + ptrs + sizes)}):"]
    if sizes:
        lines += [f"    xnumel = {spec['xnumel']}", "    if xnumel <= 0:", "        return"]
    elif int(eval(spec["xnumel"])) <= 0:   # noqa: S307 - a literal
        lines.append("    return")
    lines += [f"    p{i} = a{i}.data_ptr()" for i in range(n_ptr)]
    slow = []
    if n_ptr:
        slow.append("(" + " | ".join(f"p{i}" for i in range(n_ptr)) + ") & 15")
    if div16:
        slow.append("(" + " | ".join(sizes) + ") & 15")
    if check_guard:
        slow.append(f"not ({spec['int32_guard']})")
    if not on_stream:      # run_on's caller checked the device once for all its launches
        slow.append(f"get_device() != {device_index}")
    if slow:
        lines += [f"    if {' or '.join(slow)}:", f"        return general({', '.join(ptrs + sizes)})"]
    call_args = ", ".join([f"p{i}" for i in range(n_ptr)] + sizes + consts)
    blocks = configs.grid_source(spec, config)
    if not sizes:   # concrete: fold the grid into a literal
        blocks = str(int(eval(blocks)))   # noqa: S307 - a literal
    grid = f"{blocks}, 1, 1, {'stream' if on_stream else f'get_stream({device_index})'}, function"
    if direct_extra is not None:   # Triton's C launch function, see _triton_compat.direct_launch
        extra = ", ".join(repr(v) for v in direct_extra)
        launch = f"launch({grid}, {extra}, metadata, None, None, None, {call_args})"
    else:
        launch = f"runner({grid}, metadata, None, None, None, {call_args})"
    # (a try costs nothing until it catches: TritonKernel._launch_refused)
    lines += ["    try:", f"        {launch}", "    except TypeError as error:",
              f"        return refused({', '.join(['error'] + ptrs + sizes)})"]
    return "\n".join(lines) + "\n"
