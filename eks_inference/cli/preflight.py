"""``preflight``: check that the account is ready for the platform, one row per check.

The checks are :mod:`eks_inference.ops.preflight`; this module picks the deployment and zones
from the options, builds the clients and prints the table. boto3 is imported only when the
command runs.
"""

from __future__ import annotations

import re
from typing import Annotated

import typer

from eks_inference.cli import console, inputs
from eks_inference.cli.options import DEFAULT_PLATFORM, PlatformOption
from eks_inference.ops.errors import BadInput, CommandFailed
from eks_inference.specification.aws_types import ZONE_PATTERN

_ZONE = re.compile(ZONE_PATTERN)


def preflight(
    platform: PlatformOption = DEFAULT_PLATFORM,
    deployment: Annotated[
        str | None, typer.Option(help="Check this deployment only (account checks still run).")
    ] = None,
    availability_zones: Annotated[
        str | None,
        typer.Option(help="Comma-separated zones of the cluster; default: all of the region's."),
    ] = None,
    profile: Annotated[str | None, typer.Option(help="AWS profile to use.")] = None,
) -> None:
    """Check the account is ready: bucket, weights, compiled artifacts, instances, quotas."""
    from eks_inference.cli.preflight_render import preflight_table
    from eks_inference.ops import preflight as checks
    from eks_inference.ops.aws import clients as aws_clients

    spec = inputs.load_platform(platform)
    selected = None
    if deployment is not None:
        try:
            selected = [spec.deployment(deployment)]
        except KeyError:
            known = ", ".join(d.name for d in spec.deployments)
            raise BadInput(f"no deployment {deployment!r} in {platform}; known: {known}") from None
    zones = None
    if availability_zones is not None:
        zones = [z.strip() for z in availability_zones.split(",") if z.strip()]
        wrong = [z for z in zones if not _ZONE.match(z) or not z.startswith(spec.region)]
        if wrong or not zones:
            raise BadInput(
                f"--availability-zones must be zones of {spec.region} (e.g. {spec.region}a), "
                f"got {', '.join(wrong) or 'none'}"
            )
    session = aws_clients.connect(profile)
    clients = checks.PreflightClients(
        s3=session.client("s3", spec.region),
        ec2=session.client("ec2", spec.region),
        service_quotas=session.client("service-quotas", spec.region),
    )
    results = checks.run_preflight(spec, clients, deployments=selected, zones=zones)
    console.stdout().print(preflight_table(results))
    # An adapter that does not fit its deployment is bad input, as a spec error would be.
    refused = [r for r in results if r.failed and r.check == checks.ADAPTER_CONFIG_CHECK]
    if refused:
        raise BadInput("; ".join(f"deployment {r.scope}: {r.detail}" for r in refused))
    failed = [r for r in results if r.failed]
    if failed:
        raise CommandFailed(f"{len(failed)} of {len(results)} preflight checks failed")
