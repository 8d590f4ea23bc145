"""Chip profiles: what host tiling and the simulated cores read from the platform.

Numbers come from the CANN platform ini files and the ops' unit tests (see
docs: shared reference platforms.md): GetCoreNumAiv() is the vector-core count, and
GetCoreMemSize(UB) hands tiling the ini ub_size minus 256 bytes.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

LIB_API_WORKSPACE_BYTES = 16 * 1024 * 1024   # GetLibApiWorkSpaceSize() on these chips
UB_RESERVED_BYTES = 256                      # ini ub_size - GetCoreMemSize(UB)


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
    """
    name: str
    aiv_num: int
    ub_size: int
    npu_arch: int = 2201
    max_block_count: int = 4095
    lib_api_workspace: int = LIB_API_WORKSPACE_BYTES

    @property
    def ub_size_for_tiling(self) -> int:
        """What GetCoreMemSize(CoreMemType::UB) returns to host tiling: ub_size - 256."""
        return self.ub_size - UB_RESERVED_BYTES

    @property
    def is_regbase(self) -> bool:
        """Ascend 950 family (arch35 kernels, IsRegbase() in the aclnn layer)."""
        return self.npu_arch == 3510


PROFILES = {
    "ascend910b": SocProfile("ascend910b", aiv_num=48, ub_size=196608, npu_arch=2201, max_block_count=4095),
    "ascend910_93": SocProfile("ascend910_93", aiv_num=48, ub_size=196608, npu_arch=2201, max_block_count=4095),
    "ascend950": SocProfile("ascend950", aiv_num=64, ub_size=253952, npu_arch=3510, max_block_count=65535),
}
_ALIASES = {"910b": "ascend910b", "910_93": "ascend910_93", "950": "ascend950"}


def get_soc(name="ascend910b", *, ub_size: int | None = None, aiv_num: int | None = None) -> SocProfile:
    """A chip profile by name (case-insensitive; "910b", "910_93", "950" also accepted), or a
    SocProfile as is; `ub_size` / `aiv_num` override the profile's values (custom profile)."""
    if isinstance(name, SocProfile):
        soc = name
    else:
        key = str(name).strip().lower()
        key = _ALIASES.get(key, key)
        if key not in PROFILES:
            raise ValueError(f"unknown SoC {name!r}; known: {', '.join(PROFILES)} (or 910b, 910_93, 950)")
        soc = PROFILES[key]
    if ub_size is not None or aiv_num is not None:
        ub = soc.ub_size if ub_size is None else int(ub_size)
        cores = soc.aiv_num if aiv_num is None else int(aiv_num)
        if ub <= UB_RESERVED_BYTES:
            raise ValueError(f"ub_size must exceed {UB_RESERVED_BYTES} bytes, got {ub}")
        if cores < 1:
            raise ValueError(f"aiv_num must be at least 1, got {cores}")
        suffix = "".join(f"+{k}={v}" for k, v in (("ub", ub_size), ("aiv", aiv_num)) if v is not None)
        soc = replace(soc, name=f"{soc.name}{suffix}", ub_size=ub, aiv_num=cores)
    return soc
