"""AWS for the operations: :mod:`~eks_inference.ops.aws.clients` creates the clients,
:mod:`~eks_inference.ops.aws.errors` says what their failures mean in one line, and
:mod:`~eks_inference.ops.aws.deadlines` bounds every wait, request and command."""
