"""The synth floor: one empty stack, so only Node, jsii and aws-cdk-lib loading are timed."""

import aws_cdk as cdk

app = cdk.App()
cdk.Stack(app, "Empty")
app.synth()
