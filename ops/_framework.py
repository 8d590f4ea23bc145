"""Pieces every operator's aclnn layer shares: argument checks with the real status codes,
OpDef dtype-column matching, and the executor that launches the kernel.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ascend_sim import Kernel, RunReport, launch
from ascend_sim.datacopy import GlobalTensor
from ascend_sim.dtypes import dt_of, gm_view
from tiling.common import TilingResult, dtype_name
from tiling.status import ParamInvalidError, ParamNullptrError


def require(name: str, t) -> None:
    """161001 when a required tensor / output / attribute is missing."""
    if t is None:
        raise ParamNullptrError(f"{name} is required but is None")


def as_input(name: str, t):
    """An input tensor as a C-contiguous numpy array (aclnn's AutoContiguous); None stays None."""
    if t is None:
        return None
    if not isinstance(t, np.ndarray):
        raise ParamInvalidError(f"{name} must be a numpy array, got {type(t).__name__}")
    return np.ascontiguousarray(t)


def as_output(name: str, t):
    """An output tensor: a C-contiguous numpy array the kernel writes in place."""
    if t is None:
        return None
    if not isinstance(t, np.ndarray):
        raise ParamInvalidError(f"{name} must be a numpy array, got {type(t).__name__}")
    if not t.flags.c_contiguous or not t.flags.writeable:
        raise ParamInvalidError(f"{name} must be a writeable C-contiguous array (outputs do not support "
                                "non-contiguous tensors)")
    return t


def match_dtype_columns(op: str, named: Sequence[tuple[str, Any]], columns: Sequence[Sequence[Any]]) -> int:
    """The OpDef check of an auto-generated aclnn: the present tensors' dtypes must form one declared column.

    `named` lists (argument name, tensor or None) in OpDef order; each column lists one dtype per argument.
    Returns the matching column index or raises 161002.
    """
    present = [(i, name, np.dtype(t.dtype)) for i, (name, t) in enumerate(named) if t is not None]
    for k, col in enumerate(columns):
        if all(np.dtype(col[i]) == dt for i, _, dt in present):
            return k
    got = ", ".join(f"{name}={dtype_name(dt)}" for _, name, dt in present)
    supported = "; ".join("(" + ", ".join(dtype_name(d) for d in col) + ")" for col in columns)
    raise ParamInvalidError(f"{op}: dtype combination {got} is not supported; supported columns "
                            f"({', '.join(n for n, _ in named)}): {supported}")


def gm_tensor(array: np.ndarray | None, index: int, empty_dtype=np.uint16) -> GlobalTensor:
    """A kernel GlobalTensor over the array's bytes (no copy); an absent tensor is empty."""
    data = gm_view(array) if array is not None else np.zeros(0, dtype=empty_dtype)
    return GlobalTensor(data, index, 0)


def dtype_code(array, default: int) -> int:
    return default if array is None else dt_of(array.dtype)


@dataclass
class Executor:
    """aclOpExecutor: what phase one prepared for phase two.

    Attributes:
        op: operator name.
        tiling: the TilingResult (`executor.tiling`).
        report: the RunReport of the last run (`executor.report`), None before the first run.
    """
    op: str
    tiling: TilingResult
    kernel: Kernel | None
    args: tuple
    gm_names: tuple[str, ...]
    report: RunReport | None = None
    extra: dict = field(default_factory=dict)

    @property
    def workspace_size(self) -> int:
        return self.tiling.workspace_size

    def run(self, threads: int | None = None) -> RunReport | None:
        if self.kernel is None:  # nothing to launch (empty tensors)
            return None
        if "bind_workspace" in self.extra:
            if self.extra.get("workspace") is None:
                raise ParamNullptrError(f"{self.op} keeps data in its workspace: run it through the second aclnn "
                                        "phase with a workspace of the size the first phase returned")
            self.extra["bind_workspace"](self, self.extra["workspace"])
        self.report = launch(self.kernel, block_dim=self.tiling.block_dim, plan=self.tiling.ub_plan, args=self.args,
                             chip=self.tiling.soc, gm_names=self.gm_names, tiling_key=self.tiling.tiling_key,
                             threads=threads)
        return self.report


def run_executor(workspace, workspace_size: int, executor: Executor | None, stream=None) -> None:
    """Phase two of an aclnn call: check the workspace, launch the kernel, fill the outputs."""
    if executor is None:
        raise ParamNullptrError("executor is required but is None")
    if not isinstance(executor, Executor):
        raise ParamInvalidError(f"executor must come from the matching _get_workspace_size call, got "
                                f"{type(executor).__name__}")
    if workspace_size < executor.workspace_size:
        raise ParamInvalidError(f"workspace_size {workspace_size} is smaller than the {executor.workspace_size} "
                                "bytes the first phase asked for")
    if executor.workspace_size > 0:
        if workspace is None:
            raise ParamNullptrError(f"workspace is None but {executor.workspace_size} bytes are required")
        if not isinstance(workspace, np.ndarray) or workspace.nbytes < executor.workspace_size:
            raise ParamInvalidError(f"workspace must be an array of at least {executor.workspace_size} bytes")
        if not workspace.flags.writeable or not workspace.flags.c_contiguous:
            raise ParamInvalidError("workspace must be a writeable C-contiguous array (the kernel writes it)")
    executor.extra["workspace"] = workspace
    executor.run()
