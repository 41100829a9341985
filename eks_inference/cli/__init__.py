"""The operator CLI, ``eks-inference``: plan, upload, preflight, models, manifests and schema.

Thin commands only: each command is one module here that parses its options, calls the
operations of :mod:`eks_inference.ops` (where the logic lives, in plain functions that tests
call without the CLI) and prints what they return; :mod:`eks_inference.cli.main` registers
them. The rest is printing: consoles that never pass a terminal escape, progress bars, the
plan's tables, Markdown and plot, and the one-line error. Heavy imports (boto3, matplotlib, the
chart renderer) happen inside the commands that need them, so ``eks-inference --help`` and
``plan`` start quickly.
"""
