"""The synth floor: one empty stack, so only Node, jsii and aws-cdk-lib loading are timed."""

import aws_cdk as cdk

app = cdk.App()
stack = cdk.Stack(app, "Empty")
# The built-in template validation rejects a stack without resources; the floor is an empty
# stack on purpose, so that finding is acknowledged (the validation itself still runs).
cdk.Validations.of(stack).acknowledge(
    cdk.Acknowledgment(
        id="CloudFormation-Validate::F0001",
        reason="The benchmark floor is a stack with no resources by design.",
    )
)
app.synth()
