"""The operations behind the ``eks-inference`` commands, as plain functions and data.

No click, typer or rich here, and no aws-cdk: :mod:`eks_inference.cli` parses the arguments,
calls these and prints what they return; tests call them directly. A failure is an
:mod:`~eks_inference.ops.errors` exception whose message is the one line the command prints.

* :mod:`~eks_inference.ops.plan`: memory fit, decode throughput bound and cost, and the plan
  record; :mod:`~eks_inference.ops.quotas`: the EC2 vCPU quotas instances count against.
* :mod:`~eks_inference.ops.upload`: putting weights or compiled artifacts under an S3 prefix
  (scan, hashing, lease, transfer, verification, deletion, manifest).
* :mod:`~eks_inference.ops.preflight`: the account checks, one pass/fail row each.
* :mod:`~eks_inference.ops.served_models`: asking a deployed endpoint which models it serves.
* :mod:`~eks_inference.ops.aws`: AWS clients, their errors, and the timeouts and deadlines of
  every request; :mod:`~eks_inference.ops.s3uri`: ``s3://bucket/prefix/`` URIs.
* :mod:`~eks_inference.ops.text`: message wording, and quoting text from outside safely;
  :mod:`~eks_inference.ops.progress`: the callback an operation reports progress to.
"""
