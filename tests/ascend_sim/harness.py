"""Run hand-written test kernels on the machine model."""
from __future__ import annotations

import numpy as np

from ascend_sim import Kernel, UbBuffer, launch
from ascend_sim.datacopy import GlobalTensor
from tiling import get_soc

CHIP = get_soc("ascend910b")
CHIP950 = get_soc("ascend950")          # the register-based (MicroAPI) chip of the test_regbase* kernels


def run(stages, buffers, *args, block_dim=1, chip=CHIP, gm_names=(), threads=1):
    """Launch `stages` (numba stage functions taking (c, *args)) with the given UbBuffer plan."""
    buffers = tuple(buffers)
    kernel = Kernel.single_pipe("TestOp", "TestKernel", tuple(stages), tuple(b.name for b in buffers))
    return launch(kernel, block_dim=block_dim, plan=buffers, args=args, chip=chip, gm_names=gm_names,
                  tiling_key=7, threads=threads)


def tbuf(name, nbytes):
    return UbBuffer(name, nbytes)


def que(name, nbytes, num=2, position="VECIN", depth=1, kind="TQue"):
    return UbBuffer(name, nbytes, num, kind, position, depth)


def run_vf(kernel, p, src, out, *, buffer_bytes=1024, chip=CHIP950):
    """Launch a VF test kernel `kernel(c, p, src, dst)` on one core with two UB buffers x and y of buffer_bytes
    each, the shape of every test_regbase* kernel: p (the scenario and its arguments) as int64, src (GM input) and
    out (GM output) as the arrays given, their dtypes the kernel's GM types. Returns out."""
    run([kernel], [tbuf("x", buffer_bytes), tbuf("y", buffer_bytes)], np.array(p, dtype=np.int64),
        GlobalTensor(src, 0, 0), GlobalTensor(out, 1, 0), chip=chip)
    return out
