"""AWS for the operations: :mod:`~eks_inference.ops.aws.clients` creates the clients,
:mod:`~eks_inference.ops.aws.errors` says what their failures mean in one line,
:mod:`~eks_inference.ops.aws.deadlines` bounds every wait, request and command, and
:mod:`~eks_inference.ops.aws.answers` refuses a success cut short or missing its fields."""
