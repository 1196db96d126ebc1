"""One BLAS thread for scikit-learn's fits.

numpy and scipy each load their own OpenBLAS, each with a pool of as many threads as there
are cores. On a 2-core machine the two pools take turns spinning while one waits for the
other: the stacked router's source model (a logistic fit on 2,550 x 7,024 sparse rows, ~100
L-BFGS steps) took 2.6x longer than on one thread. The fits here are small enough that more
threads gain nothing, so they run on one (the limit is lifted when they return)."""

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """Within it (or in a function it decorates), numpy's and scipy's BLAS use one thread."""
    import sklearn.linear_model  # noqa: F401  loads scipy's OpenBLAS, so the limit reaches it
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        yield
