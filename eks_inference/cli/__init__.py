"""The operator CLI, ``eks-inference``: plan, manifests, upload and preflight.

Each command lives in its own module and keeps its logic in plain functions that tests call
without the CLI; :mod:`eks_inference.cli.main` only wires them to options and output. Heavy
imports (boto3, matplotlib, the chart renderer) happen inside the commands that need them, so
``eks-inference --help`` and ``plan`` start quickly.
"""
