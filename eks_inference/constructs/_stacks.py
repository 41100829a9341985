"""Which stack a construct is in, and that stack's region, answered in Python where it can be.

Every ``Stack.of``, ``nested_stack_parent`` or ``region`` read is a round trip to jsii's
Node.js process, and a platform of many deployments asks each question once per deployment.
The answers never change once a stack exists, and for a nested stack created here they are
known without asking: aws-cdk-lib's ``NestedStack`` takes as its parent the stack of the
scope it is created in, and that parent's account and region as its own environment. So a
nested stack's creator records it (:func:`record_nested_stack`) and these helpers answer from
Python; for any other stack they ask Node once and remember the answer.
"""

from __future__ import annotations

from weakref import WeakKeyDictionary

from aws_cdk import NestedStack, Stack
from constructs import IConstruct

_STACKS: WeakKeyDictionary[IConstruct, Stack] = WeakKeyDictionary()
_PARENTS: WeakKeyDictionary[Stack, Stack | None] = WeakKeyDictionary()
_REGIONS: WeakKeyDictionary[Stack, str] = WeakKeyDictionary()


def stack_of(scope: IConstruct) -> Stack:
    """``Stack.of(scope)``: ``scope`` itself if it is a stack, else asked of Node.js once."""
    if isinstance(scope, Stack):
        return scope
    stack = _STACKS.get(scope)
    if stack is None:
        stack = _STACKS[scope] = Stack.of(scope)
    return stack


def record_construct(construct: IConstruct, scope: IConstruct) -> None:
    """Record that ``construct``, not a stack, was created in ``scope``: it is in its stack."""
    _STACKS[construct] = stack_of(scope)


def record_nested_stack(nested: NestedStack, scope: IConstruct) -> None:
    """Record that ``nested`` was created in ``scope``: its parent is ``scope``'s stack."""
    _PARENTS[nested] = stack_of(scope)


def parent_stack(stack: Stack) -> Stack | None:
    """The stack ``stack`` is nested in (``nested_stack_parent``), or ``None`` at the top."""
    if stack not in _PARENTS:
        _PARENTS[stack] = stack.nested_stack_parent if isinstance(stack, NestedStack) else None
    return _PARENTS[stack]


def outermost_stack(stack: Stack) -> Stack:
    """The deployed stack around ``stack``: itself unless it is nested."""
    while (parent := parent_stack(stack)) is not None:
        stack = parent
    return stack


def region_of(stack: Stack) -> str:
    """``stack.region`` (possibly a token); a nested stack's is its parent's."""
    parent = parent_stack(stack)
    if parent is not None:
        return region_of(parent)
    if stack not in _REGIONS:
        _REGIONS[stack] = stack.region
    return _REGIONS[stack]
