"""Tensors in and out of the simulated aclnn calls: zero-copy NumPy views of CPU tensors, the argument checks a
torch user gets before any simulation (device, layout, dtype, requires_grad on index tensors), the chip profile
in use, and the error a failed aclnn call becomes.

A tensor crosses into NumPy as a view of the same storage: bfloat16 and the float8 formats have no NumPy dtype
of their own, so their bits are viewed as int16 / uint8 and then re-viewed as the ml_dtypes type (no copy, no
rounding). Outputs are allocated as torch tensors and the simulated kernels write into their NumPy views.
"""
from __future__ import annotations

import contextlib
import contextvars

import ml_dtypes
import numpy as np
import torch

from tiling import get_soc
from tiling.status import AclnnError

# torch dtype -> (torch dtype whose bits NumPy can hold, the NumPy dtype those bits are re-viewed as)
_BIT_VIEWS = {
    torch.bfloat16: (torch.int16, np.dtype(ml_dtypes.bfloat16)),
    torch.float8_e5m2: (torch.uint8, np.dtype(ml_dtypes.float8_e5m2)),
    torch.float8_e4m3fn: (torch.uint8, np.dtype(ml_dtypes.float8_e4m3fn)),
    torch.float8_e8m0fnu: (torch.uint8, np.dtype(ml_dtypes.float8_e8m0fnu)),
}
_PLAIN = (torch.float32, torch.float16, torch.float64, torch.int8, torch.uint8, torch.int16, torch.int32,
          torch.int64, torch.bool)

# B039 cannot see that a SocProfile is a frozen dataclass: the shared default is immutable
_SOC = contextvars.ContextVar("ascend_sim_torch_soc", default=get_soc("ascend910b"))  # noqa: B039


class TorchArgumentError(ValueError):
    """A tensor argument the bridge refuses before any simulation: `argument` names it, `rule` says why."""

    def __init__(self, op: str, argument: str, rule: str):
        self.op, self.argument, self.rule = op, argument, rule
        super().__init__(f"{op}: {argument} {rule}")


class AclnnRuntimeError(RuntimeError):
    """A simulated aclnn call that returned a failure status (`status`, as the real op's aclnnStatus), or a kernel
    that broke a machine rule (`status` None); torch_npu raises RuntimeError for both."""

    def __init__(self, op: str, status: int | None, message: str):
        self.op, self.status = op, status
        code = "" if status is None else f" (aclnn status {status})"
        super().__init__(f"{op} failed{code}: {message}")


@contextlib.contextmanager
def device(soc="ascend910b"):
    """Run the torch ops of this block on chip profile `soc` (a name such as "ascend950" or a tiling.SocProfile);
    outside every block they run on ascend910b. The profile also picks the fake kernels' quantised shapes."""
    token = _SOC.set(get_soc(soc))
    try:
        yield _SOC.get()
    finally:
        _SOC.reset(token)


def current_soc():
    """The tiling.SocProfile the torch ops run on here."""
    return _SOC.get()


def raise_as_runtime_error(op: str, e: Exception):
    """Raise the AclnnRuntimeError of a failed aclnn call (status None for a SimulatorError), chained to e."""
    raise AclnnRuntimeError(op, e.status if isinstance(e, AclnnError) else None, str(e)) from e


def check_tensor(op: str, name: str, t, *, index: bool = False, optional: bool = False):
    """t if it is a tensor the bridge can hand to the simulator (CPU or meta, contiguous, a dtype NumPy can view);
    an index tensor must not require grad. None passes when the argument is optional."""
    if t is None:
        if optional:
            return None
        raise TorchArgumentError(op, name, "is required, got None")
    if not isinstance(t, torch.Tensor):
        raise TorchArgumentError(op, name, f"must be a torch.Tensor, got {type(t).__name__}")
    if t.device.type not in ("cpu", "meta"):
        raise TorchArgumentError(op, name, f"must be on the cpu or meta device (the simulator's), got {t.device}")
    if t.layout != torch.strided:
        raise TorchArgumentError(op, name, f"must be a strided (dense) tensor, got {t.layout}")
    if not t.is_contiguous():
        raise TorchArgumentError(op, name, f"must be contiguous, got strides {tuple(t.stride())} for shape "
                                           f"{tuple(t.shape)}")
    if t.dtype not in _BIT_VIEWS and t.dtype not in _PLAIN:
        raise TorchArgumentError(op, name, f"has dtype {t.dtype}, which no operator of this family takes")
    if index and t.requires_grad:
        raise TorchArgumentError(op, name, "is an index tensor and must not require grad")
    return t


def as_numpy(t):
    """A NumPy view of the CPU tensor t's storage (None stays None); bfloat16 / float8 through a bit view."""
    if t is None:
        return None
    if t.requires_grad:         # .numpy() refuses a tensor autograd tracks; detach costs a new tensor object
        t = t.detach()
    bits = _BIT_VIEWS.get(t.dtype)
    if bits is None:
        return t.numpy()
    return t.view(bits[0]).numpy().view(bits[1])


def deterministic() -> bool:
    """The aclnn context's deterministic switch (ACL_OPT_DETERMINISTIC), which torch_npu sets from
    torch.use_deterministic_algorithms."""
    return torch.are_deterministic_algorithms_enabled()


def workspace(size_bytes: int) -> np.ndarray:
    """A workspace of size_bytes for phase two of an aclnn call (np.empty: pages are touched only if written)."""
    return np.empty(size_bytes, dtype=np.uint8)
