"""Would cuDNN's algorithm search (`torch.backends.cudnn.benchmark`) speed up the conv nets' convolutions
that fuse_all leaves to ATen (issue 11)? For each workload: the reduce-overhead (CUDA graph) median of
fuse_all and of eager under torch's cudagraphs backend, with the search off (torch's default, what Inductor
runs with) and on, each compiled afresh so the graphs capture the algorithms chosen under that setting.
    source bench/gpu_env.sh && python bench/gpu_cudnn_benchmark_probe.py [--workloads a,b]"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    from env import register_fuse_all
    from timing import median_ms
    from workloads import build
    parser = argparse.ArgumentParser()
    parser.add_argument("--workloads", default="resnet50_1x3x224x224,resnext101_64x3x7x7,train_resnet50_32x224")
    args = parser.parse_args()
    register_fuse_all()
    for name in args.workloads.split(","):
        inst = build(name, "cuda")
        row = {}
        outputs = {}
        for backend, mode in (("cudagraphs", None), ("fuse_all", "reduce-overhead")):
            for search in (False, True):
                torch.backends.cudnn.benchmark = search
                torch._dynamo.reset()
                inst.reset()
                compiled = torch.compile(inst.target, backend=backend, mode=mode)
                for _ in range(3):
                    out = inst.step(compiled)
                outputs[(backend, search)] = out
                row[(backend, search)] = median_ms(lambda: inst.step(compiled), "cuda")
        torch.backends.cudnn.benchmark = False
        cells = "  ".join(f"{b}{'+search' if s else ''} {ms:.4f} ms" for (b, s), ms in row.items())
        gains = "  ".join(f"{b} search/off {row[(b, True)] / row[(b, False)]:.3f}" for b in ("cudagraphs", "fuse_all"))
        print(f"{name}: {cells}  |  {gains}", flush=True)


if __name__ == "__main__":
    main()
