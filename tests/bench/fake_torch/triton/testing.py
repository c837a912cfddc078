"""Fake triton.testing: do_bench calls the function a few times and says 1 ms."""


def do_bench(fn, warmup=25, rep=100, grad_to_none=None, quantiles=None, return_mode="mean"):
    for _ in range(3):
        fn()
    return 1.0
