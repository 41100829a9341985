"""Stacks and the app builder: the reference platform as one CloudFormation stack.

The names load aws-cdk-lib (and with it jsii's Node.js process) when first used, so that
:mod:`eks_inference.stacks.entry` can refuse a bad platform file before paying for that.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from eks_inference.stacks.app import build_app, register_nag
    from eks_inference.stacks.inference_stack import DeploymentStack, InferenceStack

_LAZY = {
    "build_app": "eks_inference.stacks.app",
    "register_nag": "eks_inference.stacks.app",
    "DeploymentStack": "eks_inference.stacks.inference_stack",
    "InferenceStack": "eks_inference.stacks.inference_stack",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'eks_inference.stacks' has no attribute {name!r}")
    return getattr(import_module(module), name)


__all__ = ["DeploymentStack", "InferenceStack", "build_app", "register_nag"]
