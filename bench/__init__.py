"""Benchmarks: ``python3 -m bench run`` and ``python3 -m bench profile`` (docs/performance.md)."""
