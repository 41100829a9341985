"""The reference CDK app: one :class:`InferenceStack`, checked by cdk-nag at every synth."""

from __future__ import annotations

import re

from aws_cdk import App, CloudFormationValidatePlugin, Environment, Validations
from cdk_nag import AwsSolutionsChecks

from eks_inference.cdk_feature_flags import CDK_FEATURE_FLAGS
from eks_inference.specification.aws_types import (
    ACCOUNT_ID_PATTERN,
    ZONE_PATTERN,
    iam_role_arn_problem,
    public_access_cidr_problem,
)
from eks_inference.specification.platform import PlatformSpec
from eks_inference.specification.provisioning import NodeProvisioning
from eks_inference.specification.validation import Problems, SpecError
from eks_inference.stacks.inference_stack import InferenceStack

STACK_NAME = "InferenceStack"
_DEFAULT_ZONE_SUFFIXES = ("a", "b", "c")


def reference_app() -> App:
    """The reference app's ``App``: the library's feature flags
    (:data:`~eks_inference.cdk_feature_flags.CDK_FEATURE_FLAGS`, which cdk.json's context and
    ``-c`` values override) and no built-in CloudFormation validation (see :func:`build_app`).
    """
    return App(builtin_cloud_formation_validation=False, context=dict(CDK_FEATURE_FLAGS))


def build_app(platform: PlatformSpec, *, app: App | None = None) -> tuple[App, InferenceStack]:
    """Build the app for ``platform`` and register the AWS Solutions cdk-nag pack.

    Optional context (``cdk synth -c key=value``):

    * ``account`` (12 digits), ``region``: deploy to a fixed environment. The region must be
      ``platform.region`` (pods are configured with it). The VPC then uses the zones in
      ``availability_zones`` (comma-separated zones of that region), by default
      ``<region>a,b,c``; check that they offer your accelerator instance types. Without a
      region the stack is environment-agnostic and CloudFormation picks the zones (so
      ``availability_zones`` alone is refused rather than ignored).
    * ``admin_role_arn``: IAM role given cluster-admin; the ARN of one role
      (``arn:aws:iam::123456789012:role/NAME``), never a pattern.
    * ``public_access_cidrs`` (comma-separated): open a public API endpoint to these
      networks (IPv4 CIDRs with the host bits zero, never ``0.0.0.0/0``); without it the
      endpoint is private.
    * ``node_provisioning`` (``managed`` or ``karpenter``): provision the nodes this way
      instead of as the platform file says; the platform is validated again in that mode.
    * ``validate_templates=true``: also run CDK's built-in CloudFormation template validation
      (see below).
    * ``retain_chart_manifests=true``: the first of the two deploys that move a platform an
      earlier release deployed (one manifest resource per chart) to one manifest resource per
      deployment without deleting any object (docs: tearing down, upgrading).

    Context values are checked before anything is built; all their problems are raised
    together as the :class:`~eks_inference.specification.validation.SpecError` (a
    ``ValidationError`` whose text is one line) a platform's problems are, each located at its
    context key.

    cdk-nag runs as a validation plugin: any finding not acknowledged, with a reason, on the
    construct it concerns fails the synth.

    An app created here does not run CDK's built-in CloudFormation template validation
    (``CloudFormationValidatePlugin``) unless ``validate_templates=true``. Its rule engine
    takes most of a second to start and a few tenths more on its first templates (the parent
    template costs five times as much the first time as the second): a quarter to a third of
    the reference app's ``cdk synth``, spent re-checking templates whose every shape the test
    suite checks. The tests run this same validation, with the project's feature flags that
    turn its errors into synth failures, on every app they build (the reference platform, a
    fixed environment, 100 deployments of every kind), and cfn-lint on the reference app's
    templates and a nested stack of each kind. An ``app`` passed in keeps CDK's default:
    validation on.
    """
    app = app or reference_app()
    node = app.node  # read once: each read is a call into Node.js

    def context(key: str) -> str | None:
        value = node.try_get_context(key)
        return None if value is None or value == "" else str(value)

    def context_list(key: str) -> list[str] | None:
        value = context(key)
        return [item.strip() for item in value.split(",") if item.strip()] if value else None

    problems = Problems("context")
    account, region = context("account"), context("region")
    if account is not None and not re.fullmatch(ACCOUNT_ID_PATTERN, account):
        problems.add(
            ("account",),
            f"context account {account!r} is not an AWS account id; give its 12 digits, e.g. "
            "123456789012 (aws sts get-caller-identity prints it)",
        )
    if region is not None and region != platform.region:
        problems.add(
            ("region",),
            f"context region {region!r} differs from the platform's region {platform.region!r}; "
            "change `region` in the platform file instead",
        )
    given_zones = context_list("availability_zones")
    for zone in given_zones or ():
        problem = _zone_problem(zone, region or platform.region, region is not None)
        if problem is not None:
            problems.add(("availability_zones",), problem)
            break
    zones = None
    if region is not None:
        zones = given_zones or [f"{region}{suffix}" for suffix in _DEFAULT_ZONE_SUFFIXES]
    env = Environment(account=account, region=region) if account or region else None
    provisioning = context("node_provisioning")
    modes = [mode.value for mode in NodeProvisioning]
    if provisioning is not None and provisioning not in modes:
        problems.add(
            ("node_provisioning",),
            f"context node_provisioning {provisioning!r} is not one of {', '.join(modes)}",
        )
    admin_role_arn = context("admin_role_arn")
    if admin_role_arn is not None:
        problem = iam_role_arn_problem(admin_role_arn, name="context admin_role_arn")
        if problem is not None:
            problems.add(("admin_role_arn",), problem)
    public_access_cidrs = context_list("public_access_cidrs")
    for cidr in public_access_cidrs or ():
        problem = public_access_cidr_problem(cidr, name="context public_access_cidrs entry")
        if problem is not None:
            problems.add(("public_access_cidrs",), problem)
    retain_chart_manifests = context("retain_chart_manifests")
    if retain_chart_manifests not in (None, "true", "false"):
        problems.add(
            ("retain_chart_manifests",),
            f"context retain_chart_manifests {retain_chart_manifests!r} is not true or false",
        )
    problems.raise_if_any(SpecError)
    if provisioning is not None:
        platform = platform.with_node_provisioning(NodeProvisioning(provisioning))
    stack = InferenceStack(
        app,
        STACK_NAME,
        platform=platform,
        env=env,
        availability_zones=zones,
        admin_role_arn=admin_role_arn,
        public_access_cidrs=public_access_cidrs,
        retain_chart_manifests=retain_chart_manifests == "true",
    )
    register_nag(app)
    if context("validate_templates") == "true":
        # A registered instance replaces the built-in one, so templates are validated once.
        Validations.of(app).add_plugins(CloudFormationValidatePlugin())
    return app, stack


def _zone_problem(zone: str, region: str, fixed: bool) -> str | None:
    """What keeps ``zone`` from being one of ``region``'s Availability Zones for the VPC, or
    ``None``; ``fixed``: the app deploys to a fixed environment, the only one that uses it."""
    example = f"e.g. {region}a,{region}b,{region}c"
    if not re.fullmatch(ZONE_PATTERN, zone):
        return (
            f"context availability_zones entry {zone!r} is not an Availability Zone name; give "
            f"zones of {region} separated by commas, {example}"
        )
    if zone[:-1] != region:
        return (
            f"context availability_zones entry {zone!r} is a zone of {zone[:-1]}, not of the "
            f"platform's region {region}; give its zones, {example}"
        )
    if not fixed:
        return (
            "context availability_zones applies to a fixed environment only (without one, "
            f"CloudFormation picks the zones); add -c region={region}, or remove it"
        )
    return None


def register_nag(app: App) -> None:
    """Check ``app`` with the cdk-nag AWS Solutions pack; unacknowledged findings fail synth."""
    Validations.of(app).add_plugins(AwsSolutionsChecks(app, verbose=True))
