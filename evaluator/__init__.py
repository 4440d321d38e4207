"""Checking and timing candidate kernels against a PyTorch reference (see docs/architecture.md)."""
