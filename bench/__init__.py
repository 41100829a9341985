"""Benchmarks of synth and manifest rendering; see run.py."""
