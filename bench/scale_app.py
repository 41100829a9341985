"""The reference app's builder on a generated platform: ``python -m bench.scale_app 100``."""

import sys

from bench.platforms import generated_platform
from eks_inference.stacks import build_app

app, _ = build_app(generated_platform(int(sys.argv[1]) if len(sys.argv) > 1 else 100))
app.synth()
