"""What the regression modules share."""
from fuse_all_optest import assert_same, compile_fn


def run_calls(fn, calls, codegen, dynamic=None, check_strides=True):
    """Compile `fn` once (no fallback allowed) and compare to eager on each set of inputs in turn."""
    compiled = compile_fn(fn, codegen, dynamic=dynamic)
    for inputs in calls:
        expected = fn(*[x.clone() for x in inputs])
        actual = compiled(*inputs)
        assert_same(actual, expected, atol=1e-5, rtol=1e-5, check_strides=check_strides)

