"""Benchmarks side by side: `python -m bench` (see bench/__main__.py)."""
