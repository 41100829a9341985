"""CDK entry point of the reference app (`cdk synth`, `cdk deploy InferenceStack`).

`cdk synth -c platform=FILE` builds another platform file than deployments.yaml; a bad file
ends in one `error:` line and exit code 2 (see eks_inference.stacks.entry).
"""

from pathlib import Path

from eks_inference.stacks.entry import main

main(default_platform=Path(__file__).with_name("deployments.yaml"))
