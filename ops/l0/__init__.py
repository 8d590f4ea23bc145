"""The Ascend 950 l0 operators the aclnn chains launch (MoeInitRoutingV3: sort chain and unquantised gather)."""
