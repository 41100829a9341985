"""The aws-cdk-lib feature flags the library is built and tested with.

aws-cdk-lib changes what some constructs synthesize behind feature flags, which an app sets in
its context (a new project's ``cdk.json`` lists the recommended values). Every template this
library's tests check, and the reference app deploys, is synthesized with the flags here: the
values ``cdk init`` of the pinned CDK CLI (``package.json``) recommends, kept in
``cdk_feature_flags.json`` beside this module. An app of your own gets the same templates by
starting from them, ``App(context=dict(CDK_FEATURE_FLAGS))``; context from its ``cdk.json`` or
``-c`` still overrides any of them.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import MappingProxyType
from typing import Any

FLAGS_FILE = Path(__file__).with_name("cdk_feature_flags.json")

CDK_FEATURE_FLAGS: MappingProxyType[str, Any] = MappingProxyType(
    json.loads(FLAGS_FILE.read_text(encoding="utf-8"))
)
"""The feature flags every template of the library is synthesized with: start an app of your
own from them, ``App(context=dict(CDK_FEATURE_FLAGS))``."""
