"""Shifted reads (pad, cat pieces, windows) through a reshape of a non-contiguous input.

The reshape indexes its source with FloorDiv/ModularIndexing of a flat position, and the shift makes that
position negative where the pad (or cat piece) is masked; FloorDiv's own rule `(a*d + b) // d == a + b // d`
then leaves a negative `b` even at the lanes that do read (`FloorDiv(x2 - 18, 8)`, read at x2 in [2, 10)).
The index simplifier once treated such a numerator as non-negative (FloorDiv -> 0, ModularIndexing(b, 1, m)
-> b) and both codegens printed it with their truncating `/` and `%`: silently wrong values (fuzz seed 51
index 1221). Every case here reads through such a shifted, reshaped view and compares to eager exactly.
"""
import pytest
import torch
import torch.nn.functional as F

from fuse_all_optest import BOTH, check


def _fuzz_51_1221_input():
    return torch.randn(8, 66).t()[::2]        # (33, 8), strides (2, 66)


@pytest.mark.parametrize("codegen", BOTH)
def test_pad_of_a_reshaped_strided_input(codegen):
    """The fuzzer's program: 264 of 540 elements were read from the wrong address."""
    check(lambda a: F.pad(a.contiguous().view(3, 11, 8), [2, 2, 2, 2], value=1.0), _fuzz_51_1221_input(),
          codegen=codegen)


@pytest.mark.parametrize("codegen", BOTH)
def test_unflatten_then_pad(codegen):
    """The same program as the fuzzer wrote it."""
    check(lambda a: F.pad(a.unflatten(0, (3, -1)), [2, 2, 2, 2], value=1.0), _fuzz_51_1221_input(),
          codegen=codegen)


SIBLINGS = {
    # x is (6, 4) with strides (1, 6): every reshape below unflattens through FloorDiv/ModularIndexing by 4
    "pad_2d": lambda x: F.pad(x.reshape(3, 8), (2, 3, 1, 1), value=-2.0),
    "pad_3d": lambda x: F.pad(x.reshape(2, 3, 4), (1, 2, 1, 0, 1, 1)),
    "constant_pad_nd": lambda x: torch.constant_pad_nd(x.reshape(2, 12), (5, 0, 1, 0), 0.5),
    "pad_then_reduce": lambda x: F.pad(x.reshape(3, 8), (2, 2, 1, 1), value=1.0).sum(-1),
    "negative_start_slice_then_pad": lambda x: F.pad(x.reshape(3, 8)[:, -5:], (1, 1, 1, 1)),
    # a cat piece is read at (row - rows before it); the column slice adds its own offset
    "cat_then_column_slice": lambda x: torch.cat([x.reshape(3, 8) * 2, x.reshape(3, 8)], 0)[:, 1:],
    "cat_of_row_slices_then_column_slice":
        lambda x: torch.cat([x.reshape(3, 8)[1:], x.reshape(3, 8)[:2] + 1], 0)[:, 3:],
}


@pytest.mark.parametrize("codegen", BOTH)
@pytest.mark.parametrize("name", sorted(SIBLINGS))
def test_shifted_read_through_a_reshape(name, codegen):
    x = torch.randn(4, 6).t()                  # (6, 4), strides (1, 6): reshape must unflatten
    check(SIBLINGS[name], x, codegen=codegen)


@pytest.mark.parametrize("codegen", BOTH)
def test_pad_of_a_reshaped_strided_input_dynamic(codegen):
    """Dynamic shapes: the outer size is a symbol, the divisor (the source's row of 8) an integer."""
    def fn(a):
        return F.pad(a.reshape(-1, 3, 8), [2, 1, 3, 2], value=1.0)
    check(fn, torch.randn(8, 66).t()[::2], codegen=codegen, dynamic=True)
    check(fn, torch.randn(8, 90).t()[::2], codegen=codegen, dynamic=True)
