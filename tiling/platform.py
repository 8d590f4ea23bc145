"""Chip profiles: what host tiling and the simulated cores read from the platform.

Numbers come from the CANN platform ini files and the ops' unit tests (see
docs: shared reference platforms.md): GetCoreNumAiv() is the vector-core count, and
GetCoreMemSize(UB) hands tiling the ini ub_size minus 256 bytes.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass, replace

from ascend_sim.cost import STOCK_COSTS, CostModel, check_cost
from ascend_sim.cost_file import load_cost_file
from ascend_sim.errors import ConfigError, whole_number

LIB_API_WORKSPACE_BYTES = 16 * 1024 * 1024   # GetLibApiWorkSpaceSize() on these chips
UB_RESERVED_BYTES = 256                      # ini ub_size - GetCoreMemSize(UB)
SIMT_RESERVED_UB_BYTES = 40960               # SIMT_UB_SIZE_BYTE: the arch35 MoeInitRouting(V2/QuantV2) and
                                             # PermuteWithRoutingMap tilings take it off the UB on ascend950

# Custom-profile limits. Real UBs are 192-248 KiB and real chips have at most 64 vector cores; the
# bounds leave room to study much larger machines while refusing values that would only exhaust the
# host: every simulated core of a launch holds a UB-sized byte array (its LocalTensors may be views
# anywhere in it), so a launch on all cores needs aiv_num * ub_size bytes of host memory.
MIN_UB_BYTES = UB_RESERVED_BYTES + 32        # tiling must see at least one 32-byte block
MAX_UB_BYTES = 16 * 1024 * 1024
MAX_AIV_NUM = 4096
HOST_UB_BUDGET_BYTES = 4 * 1024 ** 3


class ProfileError(ConfigError):
    """A chip profile that cannot be simulated: unknown name, or a UB size / core count that is not a
    whole number in range, or that would need more host memory than the simulator allows."""


def _whole(name: str, value, low: int, high: int, unit: str) -> int:
    return whole_number(name, value, low, high, unit, ProfileError)


@dataclass(frozen=True)
class SocProfile:
    """One chip as the tiling and the simulator see it.

    Attributes:
        name: profile name ("ascend910b", "ascend910_93", "ascend950", or a custom label).
        aiv_num: vector cores, GetCoreNumAiv(): the largest block dim.
        ub_size: Unified Buffer bytes per vector core (ini ub_size); the TPipe may allocate all of it.
        npu_arch: 2201 (910B / 910_93, "membase") or 3510 (950, "regbase").
        max_block_count: DataCopy(Pad) blockCount limit (12 bits on 2201, 16 bits on 3510).
        lib_api_workspace: GetLibApiWorkSpaceSize() in bytes.
        cost: the timeline's cost model (clock, DMA and HBM rates, vector and scalar costs, sync latencies).
        simt_reserved_ub_bytes: UB bytes the SIMT data cache takes from a kernel that makes SIMT calls (0: the chip
            has no SIMT). 40960 on ascend950: ops-transformer moe_init_routing_v2_tiling.cpp,
            moe_init_routing_quant_v2_tiling_base.cpp and moe_init_routing_tiling.cpp subtract SIMT_UB_SIZE_BYTE
            from GetCoreMemSize(UB) and hand the rest to SetLocalMemorySize. (MoeInitRoutingV3's arch35 tiling
            keeps its own, larger figure: 64 KiB, SIMT_DCACHE_SIZE in tiling/moe_init_routing_v3/base.py.)
    """
    name: str
    aiv_num: int
    ub_size: int
    npu_arch: int = 2201
    max_block_count: int = 4095
    lib_api_workspace: int = LIB_API_WORKSPACE_BYTES
    cost: CostModel = CostModel()
    simt_reserved_ub_bytes: int = 0

    @property
    def ub_size_for_simt_tiling(self) -> int:
        """What an arch35 tiling with SIMT kernels plans with: GetCoreMemSize(UB) - SIMT_UB_SIZE_BYTE."""
        return self.ub_size_for_tiling - self.simt_reserved_ub_bytes

    @property
    def ub_size_for_tiling(self) -> int:
        """What GetCoreMemSize(CoreMemType::UB) returns to host tiling: ub_size - 256."""
        return self.ub_size - UB_RESERVED_BYTES

    @property
    def is_regbase(self) -> bool:
        """Ascend 950 family (arch35 kernels, IsRegbase() in the aclnn layer)."""
        return self.npu_arch == 3510


PROFILES = {
    "ascend910b": SocProfile("ascend910b", aiv_num=48, ub_size=196608, npu_arch=2201, max_block_count=4095,
                             cost=STOCK_COSTS["ascend910b"]),
    "ascend910_93": SocProfile("ascend910_93", aiv_num=48, ub_size=196608, npu_arch=2201, max_block_count=4095,
                               cost=STOCK_COSTS["ascend910_93"]),
    "ascend950": SocProfile("ascend950", aiv_num=64, ub_size=253952, npu_arch=3510, max_block_count=65535,
                            cost=STOCK_COSTS["ascend950"], simt_reserved_ub_bytes=SIMT_RESERVED_UB_BYTES),
}
"""The stock chip profiles by name: vector cores, UB bytes per core, NPU arch, cost model (get_soc also takes the
short names "910b", "910_93", "950")."""
_ALIASES = {"910b": "ascend910b", "910_93": "ascend910_93", "950": "ascend950"}


_PASSED: dict[int, SocProfile] = {}
"""Profiles check_profile has passed, by id (each kept alive here, so its id stays its own). A profile is frozen,
so one that passed passes again: get_soc (four times in a friendly call) need not check it again."""
_PASSED_LOCK = threading.Lock()
MAX_PASSED = 256


def check_profile(soc: SocProfile) -> SocProfile:
    """`soc` itself if the simulator can run it; ProfileError naming the bad field otherwise.

    Applies to every profile, also one a user builds with `dataclasses.replace` or SocProfile(...).
    """
    if _PASSED.get(id(soc)) is soc:
        return soc
    _check_profile(soc)
    with _PASSED_LOCK:
        if len(_PASSED) >= MAX_PASSED:
            del _PASSED[next(iter(_PASSED))]
        _PASSED[id(soc)] = soc
    return soc


def _check_profile(soc: SocProfile) -> None:
    if not isinstance(soc, SocProfile):
        raise ProfileError(f"soc must be a profile name or a SocProfile, got {type(soc).__name__}")
    _whole("ub_size", soc.ub_size, MIN_UB_BYTES, MAX_UB_BYTES, "bytes")
    _whole("aiv_num", soc.aiv_num, 1, MAX_AIV_NUM, "vector cores")
    _whole("max_block_count", soc.max_block_count, 1, 65535, "blocks")
    if soc.simt_reserved_ub_bytes:
        if soc.npu_arch != 3510:
            raise ProfileError(f"simt_reserved_ub_bytes must be 0 on NPU arch {soc.npu_arch} "
                               "(SIMT exists on 3510 only)")
        _whole("simt_reserved_ub_bytes", soc.simt_reserved_ub_bytes, 0, MAX_UB_BYTES, "bytes")
    if not isinstance(soc.cost, CostModel):
        raise ProfileError(f"cost must be an ascend_sim.cost.CostModel, got {type(soc.cost).__name__}")
    check_cost(soc.cost)
    if soc.npu_arch not in (2201, 3510):
        raise ProfileError(f"npu_arch must be 2201 (910B / 910_93) or 3510 (950), got {soc.npu_arch!r}")
    host = soc.aiv_num * soc.ub_size
    if host > HOST_UB_BUDGET_BYTES:
        raise ProfileError(
            f"aiv_num {soc.aiv_num:,} x ub_size {soc.ub_size:,} B needs {host / 1024 ** 3:.1f} GiB of host memory "
            f"for the simulated Unified Buffers of a full launch; at most {HOST_UB_BUDGET_BYTES // 1024 ** 3} GiB "
            "is allowed: lower aiv_num or ub_size")


def get_soc(name="ascend910b", *, ub_size: int | None = None, aiv_num: int | None = None,
            cost: dict | CostModel | str | os.PathLike | None = None) -> SocProfile:
    """A chip profile by name (case-insensitive; "910b", "910_93", "950" also accepted), or a
    SocProfile as is; `ub_size` (bytes per vector core) / `aiv_num` (vector cores) override the
    profile's values (custom profile); `cost` replaces its cost model (a CostModel) or some of its
    figures ({"hbm_bytes_per_cycle": 900, ...}, or the path of a cost file as `ascend-sim calibrate` writes it,
    ascend_sim.cost_file). Raises ProfileError (a ValueError) for an unknown name, a
    value that is not a whole number, outside [MIN_UB_BYTES, MAX_UB_BYTES] / [1, MAX_AIV_NUM], beyond
    the host-memory budget, or a cost figure that is unknown or out of range."""
    if isinstance(name, SocProfile):
        soc = name
    elif isinstance(name, str):
        key = name.strip().lower()
        key = _ALIASES.get(key, key)
        if key not in PROFILES:
            raise ProfileError(f"unknown SoC {name!r}; known: {', '.join(PROFILES)} (or 910b, 910_93, 950)")
        soc = PROFILES[key]
    else:
        raise ProfileError(f"soc must be a profile name or a SocProfile, got {type(name).__name__}")
    if ub_size is not None or aiv_num is not None:
        ub = soc.ub_size if ub_size is None else _whole("ub_size", ub_size, MIN_UB_BYTES, MAX_UB_BYTES, "bytes")
        cores = soc.aiv_num if aiv_num is None else _whole("aiv_num", aiv_num, 1, MAX_AIV_NUM, "vector cores")
        suffix = "".join(f"+{k}={v}" for k, v in (("ub", ub_size), ("aiv", aiv_num)) if v is not None)
        soc = replace(soc, name=f"{soc.name}{suffix}", ub_size=ub, aiv_num=cores)
    if cost is not None:
        try:
            if isinstance(cost, (str, os.PathLike)):
                cost = load_cost_file(cost)
            model = cost if isinstance(cost, CostModel) else soc.cost.with_overrides(dict(cost))
        except (ConfigError, TypeError, ValueError) as e:
            raise ProfileError(str(e)) from None
        soc = replace(soc, cost=model)
    return check_profile(soc)
