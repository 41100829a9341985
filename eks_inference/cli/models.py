"""``models``: ask a deployed endpoint which models it serves, and print them.

The request (bounded in time and size, the key redacted from whatever comes back) is
:mod:`eks_inference.ops.served_models`; this module reads the options and prints the answer.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from eks_inference.cli import console
from eks_inference.ops.errors import CommandFailed

# `models`: the key is read from the variable the OpenAI SDKs read; a connection to a load
# balancer opens within seconds or not at all; a model list is answered at once, so 30 s for
# the whole exchange leaves room for a cold load balancer and still stops a server that
# drips its answer a byte at a time.
DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"
DEFAULT_CONNECT_TIMEOUT_S = 5.0
DEFAULT_READ_TIMEOUT_S = 10.0
DEFAULT_DEADLINE_S = 30.0


def models(
    url: Annotated[
        str,
        typer.Option(help="The deployment's base URL, ending in /v1 (the stack's BaseUrl output)."),
    ],
    api_key_env: Annotated[
        str, typer.Option(help="Environment variable holding the API key.")
    ] = DEFAULT_API_KEY_ENV,
    no_api_key: Annotated[
        bool,
        typer.Option("--no-api-key", help="Send no key (an endpoint with authentication: none)."),
    ] = False,
    connect_timeout: Annotated[
        float, typer.Option(min=0.1, max=300, help="Seconds allowed to open the connection.")
    ] = DEFAULT_CONNECT_TIMEOUT_S,
    read_timeout: Annotated[
        float, typer.Option(min=0.1, max=3600, help="Seconds allowed for each read.")
    ] = DEFAULT_READ_TIMEOUT_S,
    deadline: Annotated[
        float,
        typer.Option(
            min=0.1,
            max=3600,
            help="Seconds allowed for the whole request: lookup, connection and answer.",
        ),
    ] = DEFAULT_DEADLINE_S,
    as_json: Annotated[bool, typer.Option("--json", help="Print the models as JSON.")] = False,
) -> None:
    """Ask a deployed endpoint which models it serves (GET /v1/models with the API key)."""
    from dataclasses import asdict

    from eks_inference.cli.models_render import models_table
    from eks_inference.ops import served_models as endpoint

    target = endpoint.models_endpoint(url)
    key = None if no_api_key else endpoint.api_key_from(api_key_env)
    served = endpoint.list_models(
        target, key, connect_timeout=connect_timeout, read_timeout=read_timeout, deadline=deadline
    )
    if as_json:
        typer.echo(json.dumps([asdict(m) for m in served]))
    else:
        console.stdout().print(models_table(target, served))
    if not served:
        raise CommandFailed(f"{target.url} serves no model")
