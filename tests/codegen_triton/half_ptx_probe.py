"""Compile the Triton kernels of rendered host programs (output_code.py files) for sm_90 with the real compiler
on this GPU-less machine and print, per program and kernel, the half-precision FMA instructions of its PTX as
JSON: compiled as its spec says (`half_fma`) and with FMA contraction forced on (`half_fma_if_fused`, the
test's control: it shows the probe sees the contraction it checks for).

    python tests/codegen_triton/half_ptx_probe.py OUTPUT_CODE...
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import sys


def main() -> int:
    assert os.environ.get("TRITON_INTERPRET", "0") in ("", "0"), "needs the real compiler"
    parser = argparse.ArgumentParser()
    parser.add_argument("output_code", nargs="+")
    opts = parser.parse_args()
    from triton.backends.compiler import GPUTarget

    from fuse_all_codegen_triton.compiler import VariantKey, compile_only

    def half_fmas(launcher, spec) -> list[str]:
        key = VariantKey(0, spec["size_type"] == "i64", True, bool(spec["sizes"]))
        ptx = compile_only(launcher._fn_for(key.int64), spec, key, target=GPUTarget("cuda", 90, 32)).asm["ptx"]
        return re.findall(r"\bfma\.rn\.(?:f16|bf16)\S*", ptx)

    found = {}
    for i, path in enumerate(opts.output_code):
        spec_ = importlib.util.spec_from_file_location(f"fuse_all_probe_program_{i}", path)
        module = importlib.util.module_from_spec(spec_)
        spec_.loader.exec_module(module)
        for name in dir(module):
            if name.endswith("_launcher"):
                launcher = getattr(module, name)
                found.setdefault(path, {})[launcher.name] = {
                    "fp_fusion": launcher.spec.get("fp_fusion", True),
                    "half_fma": half_fmas(launcher, launcher.spec),
                    "half_fma_if_fused": half_fmas(launcher, dict(launcher.spec, fp_fusion=True))}
    print(json.dumps(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
