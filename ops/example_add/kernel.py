"""KernelAdd: a double-buffered elementwise z = x + y, the "hello world" of AscendC, on the simulator.

Written against the public ascend_sim API only (ascend_sim.kernel_api as asc, the aicore /
global_aicore decorators, Kernel); it reads like its AscendC original:

    Init:    pipe.InitBuffer(inQueueX, BUFFER_NUM, tileLength * sizeof(float)), same for Y and Z
    Process: for each tile: CopyIn (DataCopy GM -> UB, EnQue), Compute (DeQue, Add, EnQue,
             FreeTensor), CopyOut (DeQue, DataCopy UB -> GM, FreeTensor)

`KERNEL_BROKEN` is the same kernel with the EnQue / DeQue of its inputs left out: it computes
the right numbers on the simulator, and checked mode (check="race") reports the race that would
make it wrong on the chip.
"""
from __future__ import annotations

from collections import namedtuple

import ascend_sim.kernel_api as asc
from ascend_sim import Kernel
from ascend_sim.kernel_api import aicore, buffer_ids, global_aicore

OP = "ExampleAdd"
BUFFER_NUM = 2                      # double buffering: two buffers per queue
BUFFERS = ("inQueueX", "inQueueY", "outQueueZ")     # the InitBuffer calls, in order
IN_QUEUE_X, IN_QUEUE_Y, OUT_QUEUE_Z = buffer_ids(BUFFERS, "inQueueX", "inQueueY", "outQueueZ")

# tiling data, as the host hands it to the kernel (a struct in AscendC)
AddTilingData = namedtuple("AddTilingData", ["total_length", "block_length", "tile_length"])
AddGm = namedtuple("AddGm", ["x", "y", "z"])


@aicore
def _core_length(c, td):
    """Elements of this core: block_length, the last core the rest."""
    return min(td.block_length, td.total_length - c.block_idx * td.block_length)


@aicore
def _tile_len(c, td, i):
    return min(td.tile_length, _core_length(c, td) - i * td.tile_length)


@aicore
def _tile_num(c, td):
    return (_core_length(c, td) + td.tile_length - 1) // td.tile_length


@aicore
def copy_in(c, td, gm, i, with_queue):
    """CopyIn: tile i of this core's x and y into fresh VECIN buffers."""
    F = asc.ub_f32(c)
    base = c.block_idx * td.block_length + i * td.tile_length
    n = _tile_len(c, td, i)
    x_local = asc.alloc_tensor(c, IN_QUEUE_X, F)
    y_local = asc.alloc_tensor(c, IN_QUEUE_Y, F)
    params = asc.DataCopyExtParams(1, n * 4, 0, 0)
    asc.data_copy_pad(c, x_local, asc.gm_at(gm.x, base), params, asc.NO_PAD)
    asc.data_copy_pad(c, y_local, asc.gm_at(gm.y, base), params, asc.NO_PAD)
    if with_queue:
        asc.en_que(c, IN_QUEUE_X, x_local)
        asc.en_que(c, IN_QUEUE_Y, y_local)
    return x_local, y_local


@aicore
def compute(c, td, i, x_local, y_local, with_queue):
    """Compute: z = x + y in a VECOUT buffer; the inputs go back to their queues."""
    F = asc.ub_f32(c)
    if with_queue:
        x_local = asc.de_que(c, IN_QUEUE_X, F)
        y_local = asc.de_que(c, IN_QUEUE_Y, F)
    z_local = asc.alloc_tensor(c, OUT_QUEUE_Z, F)
    asc.add(c, z_local, x_local, y_local, (_tile_len(c, td, i) + 7) // 8 * 8)     # whole 32-byte blocks
    asc.en_que(c, OUT_QUEUE_Z, z_local)
    asc.free_tensor(c, IN_QUEUE_X, x_local)
    asc.free_tensor(c, IN_QUEUE_Y, y_local)


@aicore
def copy_out(c, td, gm, i):
    """CopyOut: tile i of z back to GM."""
    z_local = asc.de_que(c, OUT_QUEUE_Z, asc.ub_f32(c))
    base = c.block_idx * td.block_length + i * td.tile_length
    asc.data_copy_pad(c, asc.gm_at(gm.z, base), z_local, asc.DataCopyExtParams(1, _tile_len(c, td, i) * 4, 0, 0))
    asc.free_tensor(c, OUT_QUEUE_Z, z_local)


@aicore
def _process(c, td, gm, with_queue):
    for i in range(_tile_num(c, td)):
        x_local, y_local = copy_in(c, td, gm, i, with_queue)
        compute(c, td, i, x_local, y_local, with_queue)
        copy_out(c, td, gm, i)


@global_aicore
def add_process(c, td, gm):
    """KernelAdd::Process(): CopyIn, Compute, CopyOut per tile."""
    _process(c, td, gm, True)


@global_aicore
def add_process_broken(c, td, gm):
    """Process() of the broken variant: CopyIn does not EnQue, Compute does not DeQue its inputs."""
    _process(c, td, gm, False)


KERNEL = Kernel.single_pipe(OP, "KernelAdd", (add_process,), BUFFERS)
KERNEL_BROKEN = Kernel.single_pipe(OP, "KernelAddBroken", (add_process_broken,), BUFFERS)
