"""Compile the first N example kernels through the compile workers (FUSE_ALL_COMPILE_WORKERS=processes, a
fresh TRITON_CACHE_DIR), then load each in this process as a first launch does, counting the C compiler
runs Triton makes meanwhile; prints JSON. Run by test_launcher_prebuild_cuda.py."""
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # kernel_examples


def main() -> None:
    import kernel_examples as ke
    from triton.runtime import build, driver

    from fuse_all_codegen_triton import TritonTarget, _triton_compat, compiler
    from fuse_all_ir import load_host_program, render_host_program

    folder = tempfile.mkdtemp(prefix="fuse_all_launcher_probe_")
    jobs = []
    for name in list(ke.EXAMPLES)[: int(sys.argv[1])]:
        example = ke.EXAMPLES[name]("cuda")
        module = load_host_program(render_host_program(example.program, TritonTarget(autotune=False)), folder)
        for kernel in example.program.kernels:
            launcher = getattr(module, f"{kernel}_launcher")
            spec = launcher.spec
            jobs.append((launcher.fn, spec, compiler.VariantKey(0, spec["size_type"] == "i64", True,
                                                                 bool(spec["sizes"]))))
    compiled = [compiler.compile_only(*job, target=_triton_compat.get_target(0)) for job in jobs]
    driver.active.utils      # the driver's own helper module, built once per cache: not a launcher
    builds = []
    original = build._build

    def counting_build(name, *args, **kwargs):
        builds.append(name)
        return original(name, *args, **kwargs)
    build._build = counting_build
    for kernel in compiled:
        _triton_compat.load_compiled(kernel, 0)
    workers = compiler._WORKERS
    print(json.dumps({"kernels": len(compiled), "builds_at_load": builds, "workers": len(workers._workers) if workers else 0,
                      "broken": workers.broken if workers else None}))


if __name__ == "__main__":
    main()
