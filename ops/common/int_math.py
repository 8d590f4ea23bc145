"""C++ integer helpers of the op kernels (Base::SafeDiv / CeilDiv / AlignUp), as device functions.

Division truncates toward zero like C++ `/`; a zero divisor gives 0 (AlignUp: the value itself), as
the kernels' safe helpers do.
"""
from __future__ import annotations

from ascend_sim.kernel_api import aicore


@aicore
def tdiv(a, b):
    """C++ integer division (truncates toward zero); b must not be 0."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


@aicore
def safe_div(a, b):
    """Base::SafeDiv: a / b, 0 when b == 0."""
    return 0 if b == 0 else tdiv(a, b)


@aicore
def ceil_div(a, b):
    """Base::CeilDiv: ceil(a / b), 0 when b == 0."""
    return 0 if b == 0 else tdiv(a + b - 1, b)


@aicore
def align_up(a, b):
    """Base::AlignUp: a rounded up to a multiple of b (a itself when b == 0)."""
    return a if b == 0 else tdiv(a + b - 1, b) * b
