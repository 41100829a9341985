"""Stacks and the app builder: the reference platform as one CloudFormation stack."""

from eks_inference.stacks.app import build_app, register_nag
from eks_inference.stacks.inference_stack import InferenceStack

__all__ = ["InferenceStack", "build_app", "register_nag"]
