"""bench/kernel_timeline.py (profile_kernels.py --regions): two backends' steps cut at the library kernels both
launch, so a gap spread over many generated kernels shows where in the model it sits."""
import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def timeline():
    spec = importlib.util.spec_from_file_location("kernel_timeline", BENCH / "kernel_timeline.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["kernel_timeline"] = module      # dataclasses resolve their module by name
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules["kernel_timeline"]


def is_library(name):
    return name.startswith(("cudnn", "gemm"))


def launches(timeline, *pairs):
    return [timeline.Launch(name, us) for name, us in pairs]


def test_regions_between_matched_library_kernels_hold_each_backends_own_kernels(timeline):
    inductor = launches(timeline, ("triton_poi_a", 2.0), ("cudnn_fprop", 10.0), ("triton_red_bn", 5.0),
                        ("triton_poi_bn_relu", 3.0), ("gemm_nn", 8.0), ("triton_poi_tail", 1.0))
    fuse_all = launches(timeline, ("kernel_0", 3.0), ("cudnn_fprop", 11.0), ("kernel_1_part0", 4.0),
                        ("kernel_1", 3.0), ("kernel_2", 4.0), ("gemm_nn", 8.0), ("kernel_3", 1.0))
    found = timeline.regions(inductor, fuse_all, is_library)
    assert [(r.first_us, r.second_us) for r in found] == [(2.0, 3.0), (8.0, 11.0), (1.0, 1.0)]
    assert [r.closing[1].name if r.closing else None for r in found] == ["cudnn_fprop", "gemm_nn", None]
    assert [k.name for k in found[1].second] == ["kernel_1_part0", "kernel_1", "kernel_2"]
    lines = timeline.report("inductor", "fuse_all", found, top=5)
    assert "between them inductor 0.011 ms, fuse_all 0.015 ms" in lines[0]
    assert "the matched kernels themselves 0.018 / 0.019 ms" in lines[0]
    slower = lines.index("  regions where fuse_all slower, by the difference (of 2):")
    assert lines[slower + 1].startswith("    #1    +0.0030 ms, before gemm_nn")
    assert "triton_red_bn 5.0, triton_poi_bn_relu 3.0" in lines[slower + 2]


def test_a_library_kernel_only_one_backend_launches_merges_its_two_regions(timeline):
    """fuse_all's bmm where Inductor runs cuDNN: the anchors around it still match, the odd ones fall inside."""
    inductor = launches(timeline, ("cudnn_a", 1.0), ("triton_x", 1.0), ("cudnn_grouped", 9.0),
                        ("triton_y", 1.0), ("cudnn_b", 1.0))
    fuse_all = launches(timeline, ("cudnn_a", 1.0), ("kernel_x", 1.0), ("gemm_bmm", 3.0),
                        ("kernel_y", 1.0), ("cudnn_b", 1.0))
    found = timeline.regions(inductor, fuse_all, is_library)
    assert [(r.first_us, r.second_us) for r in found] == [(0.0, 0.0), (11.0, 5.0), (0.0, 0.0)]


def test_a_step_is_the_mean_over_the_profiled_steps_when_they_launch_the_same_kernels(timeline):
    def event(start, name, us, device="DeviceType.CUDA"):
        return SimpleNamespace(time_range=SimpleNamespace(start=start), name=name, device_time=us,
                               device_type=device)

    events = [event(30, "b", 4.0), event(10, "a", 1.0), event(5, "host", 9.0, "DeviceType.CPU"),
              event(50, "a", 3.0), event(70, "b", 6.0)]
    step, same = timeline.step_launches(events, steps=2)
    assert same and step == launches(timeline, ("a", 2.0), ("b", 5.0))
    events.append(event(90, "c", 1.0))
    step, same = timeline.step_launches(events, steps=2)
    assert not same and step == launches(timeline, ("a", 1.0), ("b", 4.0))


def test_a_long_region_is_listed_by_kernel_name_with_counts(timeline):
    """An optimizer step's tail (160 copies and ~50 small kernels in train_resnet50) as one line per name,
    the largest totals first, the rest summed."""
    many = [timeline.Launch("Memcpy DtoD", 1.0)] * 150 + [timeline.Launch(f"kernel_{i}", 2.0 + i) for i in range(14)]
    listed = timeline._kernels(many)
    assert listed.startswith("Memcpy DtoD 150x 150.0, kernel_13 1x 15.0, kernel_12 1x 14.0")
    assert listed.endswith("3 more launches of 3 kernels 9.0")       # kernel_2, kernel_1, kernel_0: 4 + 3 + 2
    assert timeline._kernels(many[:3]) == "Memcpy DtoD 1.0, Memcpy DtoD 1.0, Memcpy DtoD 1.0"
