"""Level-0 operator kernels."""
