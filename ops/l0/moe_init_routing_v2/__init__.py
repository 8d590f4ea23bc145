"""l0op::MoeInitRoutingV2 on Ascend 950: the arch35 kernels aclnnMoeTokenPermute (V1) launches for fp16 / bf16 /
fp32 tokens, with activeNum = numOutTokens, expertCapacity 0, expertNum 0, dropPadMode 0, no expert-token counts.

source: moe/moe_init_routing_v2/op_host/op_api/moe_init_routing_v2.cpp and op_kernel/moe_init_routing_v2.cpp
@ 25fb6b92890d.

    expanded_row_idx[slot] = the output row of flat slot `slot` (stable ascending sort of the flat expert ids)
    expanded_x[row] = x[slot // k] for the rows row < activeRows (the slot sorted to that row)

activeRows = min(activeNum, n * k) for activeNum > 0 and max(n * k + activeNum, 0) for activeNum <= 0 (0 keeps every
row), as the regbase tiling computes it. The tiling is tiling.moe_init_routing_v2; the kernels of keys 10001 / 10002 /
11001 / 11002 are kernel.KERNELS (by key and scatterMode). Drop-pad mode and the expert-token-count outputs are not
modelled: the entry refuses them with NotImplementedError after the real checks (which it runs in full) have passed;
so does an A2 / A3 profile (their MoeInitRoutingV2 kernels are the membase ones).

Two phases as every l0 launch here: `get_workspace_size(...) -> (workspace_size, Executor)`, then
`run(workspace, workspace_size, executor)` (or a KernelStep of a composite aclnn) fills the outputs in place.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from ascend_sim.dtypes import dt_of, gm_view
from tiling import get_soc
from tiling.moe_init_routing_v2 import FIELDS, LIB_API_WORKSPACE
from tiling.moe_init_routing_v2 import moe_init_routing_v2 as _tiling

from ..._framework import Executor, IndexLink, gm_tensor, run_executor
from ..._validate import as_input, as_output, check_no_alias, flag, int_attr, require
from .kernel import KERNELS, GmTensors, Template

OP = "MoeInitRoutingV2"
API = "l0op::MoeInitRoutingV2"
GM_NAMES = ("x", "expert_idx", "expanded_x", "expanded_row_idx", "workspace", "workspace")
# named after the C++ struct; the class must be importable under its own name for numba's disk cache
MoeInitRoutingV2TilingData = namedtuple("MoeInitRoutingV2TilingData", FIELDS)


UB_ADVICE = ("the multi-core sort's three buffers each hold four 2048-pair merge windows (64 KiB; the int64 in-queue "
             "96 KiB) whatever the UB; the one-core sort and the gather shrink with the UB the tiling is given")


def _bind_workspace(args: tuple, workspace: np.ndarray, workspace_size: int) -> tuple:
    """The user workspace (after the 16 MiB library workspace) as int32 and as float32 GM over the same bytes."""
    td, gm, tmpl = args
    user = workspace.reshape(-1).view(np.uint8)[LIB_API_WORKSPACE: workspace_size]
    user = user[: user.size - user.size % 4]
    return td, gm._replace(ws_i32=gm_tensor(user.view(np.int32), 4, np.int32),
                           ws_f32=gm_tensor(user.view(np.float32), 5, np.float32)), tmpl


def get_workspace_size(x, expert_idx, *, active_num, expert_capacity, expert_num, drop_pad_mode,
                       expert_tokens_count_or_cumsum_flag, expert_tokens_before_capacity_flag, expanded_x_out,
                       expanded_row_idx_out, expert_tokens_count_or_cumsum_out=None,
                       expert_tokens_before_capacity_out=None, soc="ascend950"):
    """l0op::MoeInitRoutingV2 -> (workspace_size, Executor). x (N, H) fp16 / bf16 / fp32, expert_idx (N, K) or (N,)
    int32 / int64; expanded_x_out (activeRows, H) in x's dtype and expanded_row_idx_out (N * K,) int32 are filled by
    the run. Attribute and shape errors are the tiling's (161002 / 561002)."""
    soc = get_soc(soc)
    require("x", x)
    require("expert_idx", expert_idx)
    require("expanded_x_out", expanded_x_out)
    require("expanded_row_idx_out", expanded_row_idx_out)
    xa, idx = as_input("x", x), as_input("expert_idx", expert_idx)
    out_x, out_row = as_output("expanded_x_out", expanded_x_out), as_output("expanded_row_idx_out",
                                                                           expanded_row_idx_out)
    count_out = as_output("expert_tokens_count_or_cumsum_out", expert_tokens_count_or_cumsum_out)
    before_out = as_output("expert_tokens_before_capacity_out", expert_tokens_before_capacity_out)
    tensors = dict(x=xa, expert_idx=idx, expanded_x_out=out_x, expanded_row_idx_out=out_row)
    check_no_alias({"x": xa, "expert_idx": idx},
                   {"expanded_x_out": out_x, "expanded_row_idx_out": out_row,
                    "expert_tokens_count_or_cumsum_out": count_out, "expert_tokens_before_capacity_out": before_out})
    result = _tiling(xa, idx, active_num=int_attr("active_num", active_num),
                     expert_capacity=int_attr("expert_capacity", expert_capacity),
                     expert_num=int_attr("expert_num", expert_num),
                     drop_pad_mode=int_attr("drop_pad_mode", drop_pad_mode),
                     expert_tokens_count_or_cumsum_flag=int_attr("expert_tokens_count_or_cumsum_flag",
                                                                 expert_tokens_count_or_cumsum_flag),
                     expert_tokens_before_capacity_flag=flag("expert_tokens_before_capacity_flag",
                                                             expert_tokens_before_capacity_flag),
                     expanded_x_out=out_x, expanded_row_idx_out=out_row,
                     expert_tokens_count_or_cumsum_out=count_out, expert_tokens_before_capacity_out=before_out,
                     soc=soc)
    if not soc.is_regbase:
        raise NotImplementedError(f"{OP}: only the Ascend 950 (arch35) kernels are simulated, not {soc.name}'s")
    f = result.fields
    if f["drop_pad_mode"] != 0 or f["expert_tokens_count_or_cumsum_flag"] != 0:
        raise NotImplementedError(f"{OP}: drop-pad mode and the expert-token-count outputs are not simulated "
                                  "(only the dropless path MoeTokenPermute takes)")
    kernel = KERNELS[(result.tiling_key, f["gather_out_scatter_mode"])]
    td = MoeInitRoutingV2TilingData(*f.values())
    gm = GmTensors(gm_tensor(xa, 0), gm_tensor(idx, 1, np.int32), gm_tensor(out_x, 2, gm_view(xa).dtype),
                   gm_tensor(out_row, 3, np.int32), gm_tensor(None, 4, np.int32), gm_tensor(None, 5, np.float32))
    tmpl = Template(dt_of(xa.dtype), dt_of(idx.dtype), f["gather_out_scatter_mode"])
    links = (IndexLink("expanded_row_idx_out", "expanded_x", f["cols"], out_x.shape[0]),)
    executor = Executor(OP, result, kernel, (td, gm, tmpl), GM_NAMES, api=API, tensors=tensors, index_links=links,
                        ub_advice=UB_ADVICE, bind_workspace=_bind_workspace, writes=(out_x, out_row))
    return result.workspace_size, executor


def run(workspace, workspace_size, executor, stream=None, check=None) -> None:
    """Launch the l0 kernel of an executor from get_workspace_size; the outputs are filled in place."""
    run_executor(API, workspace, workspace_size, executor, stream, check)
