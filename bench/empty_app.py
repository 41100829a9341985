"""The synth floor: one empty stack, so only Node, jsii and aws-cdk-lib loading are timed.

The app is created as the reference app creates its own (``build_app``): without CDK's
built-in template validation, whose rule engine alone takes more than a second to start. A
floor that paid for it would make every app that skips it look cheaper than it is. It starts
from the library's feature flags as the reference app does, read from their file so that the
floor imports nothing of the library.
"""

import json
from pathlib import Path

import aws_cdk as cdk

FLAGS = Path(__file__).resolve().parent.parent / "eks_inference" / "cdk_feature_flags.json"

app = cdk.App(builtin_cloud_formation_validation=False, context=json.loads(FLAGS.read_text()))
cdk.Stack(app, "Empty")
app.synth()
