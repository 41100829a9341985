"""The package's engines, registered in :data:`eks_inference.specification.engine_registry.ENGINES`.

The package root has the registry import this module on its first use, so a spec naming a
built-in engine validates however the package was entered.
"""

from __future__ import annotations

from eks_inference.charts.serving import ServingEngine
from eks_inference.engines.dynamo.engine import DynamoEngine
from eks_inference.engines.kserve.engine import KServeEngine
from eks_inference.engines.rayservice.engine import RayServiceEngine
from eks_inference.engines.triton.engine import TritonEngine
from eks_inference.engines.vllm.engine import VllmEngine
from eks_inference.specification.engine_registry import ENGINES

#: The engines the package serves with, in the order ``eks-inference schema`` lists them.
BUILT_IN_ENGINES: tuple[ServingEngine, ...] = (
    VllmEngine(),
    RayServiceEngine(),
    KServeEngine(),
    TritonEngine(),
    DynamoEngine(),
)

for _engine in BUILT_IN_ENGINES:
    ENGINES.register(_engine)
