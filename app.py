"""CDK entry point of the reference app (`cdk synth`, `cdk deploy InferenceStack`)."""

from pathlib import Path

from eks_inference.platform import PlatformSpec
from eks_inference.stacks import build_app

app, _ = build_app(PlatformSpec.from_yaml(Path(__file__).with_name("deployments.yaml")))
app.synth()
