"""triton."""
