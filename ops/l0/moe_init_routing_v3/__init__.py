"""MoeInitRoutingV3 (Ascend 950 arch35 kernels)."""
