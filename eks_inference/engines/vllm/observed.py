"""How a vLLM deployment with LoRA adapters is watched beyond every deployment's signals.

vLLM 0.34.0 reports its adapters in one gauge, ``vllm:lora_requests_info``
(:data:`~eks_inference.metrics.VLLM_LORA_REQUESTS_INFO`): a series per combination of the
adapters with requests running (``running_lora_adapters``) and waiting
(``waiting_lora_adapters``), each a comma-joined list of names, whose value is the time the
combination was last seen. The current state of a pod is therefore its series with the
latest value (``topk by (pod) (1, ...)``). It exports no adapter load time; adapter loads show
as time to first token.

A request waits for an adapter when all ``max_loras`` slots hold other adapters: the alert
fires when a replica has had adapters waiting for ten minutes, the signal to raise
``max_loras`` (each slot costs KV cache, see ``eks-inference plan``) or to add replicas.
"""

from __future__ import annotations

from eks_inference import metrics
from eks_inference.observability.observed import EngineAlert, EnginePanel
from eks_inference.observability.signals import DEPLOYMENT_LABEL, matchers
from eks_inference.specification.deployment import ModelDeploymentSpec

_WAITING_FOR_S = 600


def _latest(spec: ModelDeploymentSpec) -> str:
    """Each pod's current adapter state: its series of ``vllm:lora_requests_info`` last set."""
    selector = matchers(**{DEPLOYMENT_LABEL: spec.name})
    return f"topk by (pod) (1, {metrics.VLLM_LORA_REQUESTS_INFO.one()}{selector})"


def _waiting(spec: ModelDeploymentSpec) -> str:
    """Pods whose current state has adapters waiting for a slot."""
    selector = matchers(**{DEPLOYMENT_LABEL: spec.name}, waiting_lora_adapters="")
    info = metrics.VLLM_LORA_REQUESTS_INFO.one()
    return f"({_latest(spec)} unless {info}{selector})"


def alerts(spec: ModelDeploymentSpec) -> tuple[EngineAlert, ...]:
    """With adapters: requests waiting for an adapter slot on a replica for ten minutes."""
    if spec.adapters is None:
        return ()
    return (
        EngineAlert(
            "LoraAdaptersWaiting",
            f"count({_waiting(spec)}) > 0",
            _WAITING_FOR_S,
            "warning",
            f"{spec.name}: requests wait for a LoRA adapter slot "
            f"(all {spec.adapters.max_loras} in use)",
            "More adapters are asked for at once than adapters.max_loras slots hold: raise "
            "max_loras (each slot costs KV cache; eks-inference plan prints how much) or add "
            "replicas.",
        ),
    )


def panels(spec: ModelDeploymentSpec) -> tuple[EnginePanel, ...]:
    """With adapters: each replica's adapters with requests running and waiting, and how
    many replicas have adapters waiting."""
    if spec.adapters is None:
        return ()
    latest = _latest(spec)
    return (
        EnginePanel(
            "LoRA adapters running and waiting",
            "Per replica, the adapters with requests in the batch and those waiting for a "
            "slot (legend), as vLLM last reported them.",
            "none",
            (
                (
                    f"count by (pod, running_lora_adapters, waiting_lora_adapters) ({latest})",
                    "{{pod}} running: {{running_lora_adapters}} waiting: {{waiting_lora_adapters}}",
                ),
            ),
        ),
        EnginePanel(
            "Replicas with adapters waiting",
            f"Replicas whose requests wait for one of the {spec.adapters.max_loras} adapter slots.",
            "none",
            ((f"count({_waiting(spec)}) or vector(0)", "replicas"),),
        ),
    )
