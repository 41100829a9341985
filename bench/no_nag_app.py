"""The reference app without cdk-nag: what the AWS Solutions checks cost us, by difference.

``build_app`` as the reference app runs it (no context: environment-agnostic, managed node
groups), except that no AwsSolutionsChecks plugin is registered and ``cdk_nag`` is never
imported, so neither its jsii assembly nor its checks are paid for.
"""

from pathlib import Path

from aws_cdk import App

from eks_inference.cdk_feature_flags import CDK_FEATURE_FLAGS
from eks_inference.specification.platform import PlatformSpec
from eks_inference.stacks.inference_stack import InferenceStack

platform = PlatformSpec.from_yaml(Path(__file__).resolve().parent.parent / "deployments.yaml")
# The reference app's App (eks_inference.stacks.app.reference_app, whose module imports cdk_nag).
app = App(builtin_cloud_formation_validation=False, context=dict(CDK_FEATURE_FLAGS))
# The reference app's stack name (eks_inference.stacks.app.STACK_NAME, whose module imports
# cdk_nag): the same id gives the same logical ids, so the templates are the reference app's.
InferenceStack(app, "InferenceStack", platform=platform)
app.synth()
