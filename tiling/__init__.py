"""Host-side tiling of the MoE token permute / unpermute operators, per chip profile.

`tiling.<op_name>(inputs..., attrs..., soc=...)` returns the real op's TilingResult
(tilingKey, block dim, workspace, tiling-struct fields in order, UB plan) or raises
TilingError where the real tiling fails. It knows no kernel code.
"""
from .common import TensorDesc, TilingResult, as_dtype, length_by_type
from .moe_finalize_routing_v2 import moe_finalize_routing_v2
from .moe_finalize_routing_v2_grad import moe_finalize_routing_v2_grad
from .moe_init_routing_v2 import moe_init_routing_v2
from .moe_init_routing_v2_grad import moe_init_routing_v2_grad
from .moe_init_routing_v3 import moe_init_routing_v3
from .moe_inplace_index_add import moe_inplace_index_add
from .moe_masked_scatter import moe_masked_scatter
from .moe_token_permute import moe_token_permute
from .moe_token_permute_grad import moe_token_permute_grad
from .moe_token_permute_with_routing_map import moe_token_permute_with_routing_map
from .moe_token_permute_with_routing_map_grad import moe_token_permute_with_routing_map_grad
from .moe_token_unpermute import moe_token_unpermute
from .moe_token_unpermute_grad import moe_token_unpermute_grad
from .moe_token_unpermute_with_routing_map import moe_token_unpermute_with_routing_map
from .moe_token_unpermute_with_routing_map_grad import moe_token_unpermute_with_routing_map_grad
from .platform import PROFILES, SocProfile, get_soc
from .reference import REFERENCE_COMMIT, REFERENCE_REPO, reference, reference_line
from .status import AclnnError, InnerNullptrError, ParamInvalidError, ParamNullptrError, TilingError
