"""Building blocks shared by several operators' kernels (the multi-stage sort)."""
