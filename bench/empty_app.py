"""The synth floor: one empty stack, so only Node, jsii and aws-cdk-lib loading are timed.

The app is created as the reference app creates its own (``build_app``): without CDK's
built-in template validation, whose rule engine alone takes more than a second to start. A
floor that paid for it would make every app that skips it look cheaper than it is.
"""

import aws_cdk as cdk

app = cdk.App(builtin_cloud_formation_validation=False)
cdk.Stack(app, "Empty")
app.synth()
