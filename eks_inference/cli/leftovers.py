"""``leftovers``: list what a destroyed platform left in the account, with the commands that
remove it.

The listing is :mod:`eks_inference.ops.leftovers`; this module reads the platform file for
the cluster's name and region, builds the clients and prints a table or JSON. It exits 0 when
nothing is left and 1 when something is, so that a script can wait on it after a destroy.
boto3 is imported only when the command runs.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from eks_inference.cli import console, inputs
from eks_inference.cli.options import DEFAULT_PLATFORM, PlatformOption
from eks_inference.ops.errors import BadInput, CommandFailed

# The stack the project's app creates (its nested stacks are named after it); kept here rather
# than imported from the app, which loads aws-cdk, or from ops.leftovers, which loads boto3,
# so that --help loads neither.
DEFAULT_STACK_NAME = "InferenceStack"

# A CloudFormation stack name: a letter, then letters, digits and hyphens, 128 at most.
_STACK_NAME_PATTERN = r"^[A-Za-z][-A-Za-z0-9]{0,127}$"


def leftovers(
    platform: PlatformOption = DEFAULT_PLATFORM,
    stack_name: Annotated[
        str, typer.Option(help="The platform's CloudFormation stack (the app's is the default).")
    ] = DEFAULT_STACK_NAME,
    as_json: Annotated[bool, typer.Option("--json", help="Print the resources as JSON.")] = False,
    profile: Annotated[str | None, typer.Option(help="AWS profile to use.")] = None,
) -> None:
    """List what a destroyed platform left in the account (instances, load balancers, ...)."""
    import re
    from dataclasses import asdict

    from rich.markup import escape
    from rich.table import Table

    from eks_inference.ops import leftovers as listing
    from eks_inference.ops.aws import clients as aws_clients

    if not re.fullmatch(_STACK_NAME_PATTERN, stack_name):
        raise BadInput(
            f"--stack-name must be a CloudFormation stack name (a letter, then letters, digits "
            f"and hyphens, at most 128), got {stack_name!r}"
        )
    spec = inputs.load_platform(platform)
    owner = listing.Owner(cluster=spec.cluster_name, stack=stack_name, region=spec.region)
    session = aws_clients.connect(profile)
    clients = listing.LeftoverClients(
        ec2=session.client("ec2", spec.region),
        elbv2=session.client("elbv2", spec.region),
        fsx=session.client("fsx", spec.region),
    )
    try:
        found = listing.find_leftovers(clients, owner)
    except CommandFailed as error:
        raise session.deadlines.failure(error) from None
    where = f"cluster {owner.cluster} (stack {owner.stack}) in {owner.region}"
    if as_json:
        typer.echo(json.dumps([asdict(item) for item in found], indent=2))
    elif found:
        table = Table(title=f"Left by {where}: {len(found)}", title_justify="left")
        for column in ("kind", "id", "detail", "tag"):
            table.add_column(column, overflow="fold")
        table.add_column("remove with", overflow="fold")
        for item in found:
            table.add_row(
                *(escape(v) for v in (item.kind, item.id, item.detail, item.tag)),
                escape(item.command),
            )
        console.stdout().print(table)
    else:
        typer.echo(f"nothing of {where} is left")
    if found:
        raise CommandFailed(
            f"{len(found)} resources of {where} are left; remove them with the commands "
            "listed, in that order"
        )
