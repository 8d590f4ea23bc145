"""ExampleAdd: z = x + y (float32), a complete example operator on the public ascend_sim API.

It has what every operator of this package has, in a few lines each: a host tiling sized against
the chip profile's UB (`tiling`), the two-phase aclnn call (`get_workspace_size`, then `run`
with the executor), a friendly call (`add`), a golden (`golden`), and a kernel (kernel.py). See
docs/guides/write-your-own-kernel.md and tests/ops/test_example_add.py.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import ascend_sim.kernel_api as asc
from ascend_sim import Kernel, RunReport, UbBuffer, launch
from ascend_sim.kernel_api import BLOCK_BYTES
from tiling import get_soc
from tiling.platform import SocProfile

from .kernel import BUFFER_NUM, BUFFERS, KERNEL, KERNEL_BROKEN, AddGm, AddTilingData


@dataclass(frozen=True)
class AddTiling:
    """The host tiling: `block_dim` cores, each `data.block_length` elements (the last core the rest) in tiles
    of `data.tile_length`."""
    soc: SocProfile
    block_dim: int
    data: AddTilingData
    ub_plan: tuple

    @property
    def ub_plan_bytes(self) -> int:
        return sum(b.count * b.bytes for b in self.ub_plan)


def tiling(total_length: int, soc="ascend910b") -> AddTiling:
    """Split `total_length` float32 elements over the cores (whole 32-byte blocks per core, at most
    aiv_num cores) and size the tiles so that the six queue buffers (x, y, z, two each) fill the UB."""
    soc = get_soc(soc)
    if not isinstance(total_length, (int, np.integer)) or total_length < 1:
        raise ValueError(f"total_length must be a positive whole number of elements, got {total_length!r}")
    per_block = BLOCK_BYTES // 4
    blocks = -(-int(total_length) // per_block)
    block_dim = min(soc.aiv_num, blocks)
    block_length = -(-blocks // block_dim) * per_block
    block_dim = -(-int(total_length) // block_length)          # every core gets work
    tile_bytes = soc.ub_size // (3 * BUFFER_NUM) // BLOCK_BYTES * BLOCK_BYTES
    tile_length = min(tile_bytes // 4, block_length)
    data = AddTilingData(int(total_length), block_length, tile_length)
    plan = tuple(UbBuffer(name, tile_length * 4, BUFFER_NUM, "TQue", pos, 1)
                 for name, pos in zip(BUFFERS, ("VECIN", "VECIN", "VECOUT"), strict=True))
    return AddTiling(soc, block_dim, data, plan)


@dataclass
class AddExecutor:
    """What phase one prepared: the tiling, the kernel and its arguments; `report` after phase two."""
    tiling: AddTiling
    kernel: Kernel
    args: tuple
    report: RunReport | None = None


def get_workspace_size(x: np.ndarray, y: np.ndarray, z: np.ndarray, *, soc="ascend910b",
                       broken: bool = False) -> tuple[int, AddExecutor]:
    """Phase one: check the tensors, tile, and return (workspace bytes, executor). `broken` picks the variant
    without the input queue syncs (for the checked-mode demonstration)."""
    for name, t in (("x", x), ("y", y), ("z", z)):
        if not isinstance(t, np.ndarray) or t.dtype != np.float32 or not t.flags.c_contiguous:
            raise TypeError(f"{name} must be a C-contiguous float32 array")
    if not (x.shape == y.shape == z.shape):
        raise ValueError(f"x, y and z must have one shape, got {x.shape}, {y.shape}, {z.shape}")
    t = tiling(x.size, soc)
    gm = AddGm(*(asc.GlobalTensor(a.reshape(-1), i, 0) for i, a in enumerate((x, y, z))))
    return 0, AddExecutor(t, KERNEL_BROKEN if broken else KERNEL, (t.data, gm))


def run(workspace, workspace_size: int, executor: AddExecutor, stream=None, check=None, threads=None) -> RunReport:
    """Phase two: launch the kernel; z is filled in place. `check` ("race" / "strict") runs it in checked mode."""
    t = executor.tiling
    executor.report = launch(executor.kernel, block_dim=t.block_dim, plan=t.ub_plan, args=executor.args, chip=t.soc,
                             gm_names=("x", "y", "z"), tiling_key=0, threads=threads, check=check)
    return executor.report


def add(x: np.ndarray, y: np.ndarray, *, soc="ascend910b", check=None) -> np.ndarray:
    """The friendly call: z = x + y through the simulated kernel."""
    z = np.empty_like(x)
    size, executor = get_workspace_size(x, y, z, soc=soc)
    run(None, size, executor, check=check)
    return z


def golden(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """IEEE float32 addition, elementwise: what the vector unit computes."""
    return (x.astype(np.float32) + y.astype(np.float32)).astype(np.float32)
