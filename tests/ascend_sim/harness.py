"""Run hand-written test kernels on the machine model."""
from __future__ import annotations

from ascend_sim import Kernel, UbBuffer, launch
from tiling import get_soc

CHIP = get_soc("ascend910b")


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
