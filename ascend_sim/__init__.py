"""ascend_sim: a CPU model of the AscendC vector-core programming model.

Global memory, each vector core's Unified Buffer, TPipe buffer plans, TQue / TBuf state,
DataCopy / DataCopyPad, vector instructions, intra-core events and SyncAll, executed by
numba-compiled kernels on simulated cores running in parallel threads. It knows no
operator: operators (package `ops`) bring their kernels and buffer plans.

Kernel code uses `ascend_sim.kernel_api`; hosts use `launch`. Every launch also keeps a timeline
of its calls under the chip's cost model (`RunReport.estimate`); `tracing` logs every call for a
Perfetto trace.
"""
# The package's version, in this one place: pyproject.toml reads it (setuptools' dynamic version) into the
# package metadata, and `ascend-sim --version` prints it. CHANGELOG.md says what each version holds.
__version__ = "0.1.0"

# imported here so the package holds them whatever the caller imports: kernel stamps (_jit.source_stamp) hash the
# submodules the package holds, and a submodule imported later would make a cached kernel look stale
from . import (
    cost_file,
    host_cost,
    host_tier,  # noqa: F401 - installs the host helpers' tier rule into _jit
)
from ._jit import cache_state, ensure_compiled, stage_signature
from .check import checked
from .cost import CostModel
from .errors import (
    AlignmentError,
    BufferPlanError,
    ConfigError,
    ElementTypeError,
    OutOfBoundsError,
    OverlapError,
    ParamRangeError,
    PipeRaceError,
    QueueError,
    SimulatorError,
    SyncError,
    UBOverflowError,
    UninitializedReadError,
    UnpairedFlagError,
    UnsupportedDtypeError,
)
from .estimate import CoreTime, Estimate, LaunchSequence
from .launch import SYNC_ALL, Branch, Kernel, PipePhase, default_threads, launch, resolve_threads, stage_calls
from .pipe import PipePlan, UbBuffer, plan_pipe
from .report import CoreReport, RunReport
from .tier import TIERS, execution_tier
from .trace import tracing, write_json

__all__ = [
    "TIERS", "execution_tier",
    "__version__",
    "ConfigError", "SimulatorError", "UBOverflowError", "OutOfBoundsError", "AlignmentError", "ElementTypeError",
    "ParamRangeError",
    "QueueError", "PipeRaceError", "OverlapError", "checked",
    "SyncError", "Kernel", "PipePhase", "Branch", "SYNC_ALL", "launch", "default_threads", "UbBuffer", "PipePlan",
    "plan_pipe",
    "RunReport", "CoreReport", "CostModel", "Estimate", "CoreTime", "LaunchSequence", "tracing", "write_json",
    "resolve_threads", "stage_calls", "ensure_compiled", "cache_state", "stage_signature",
    "BufferPlanError", "UnsupportedDtypeError", "UninitializedReadError", "UnpairedFlagError",
]
