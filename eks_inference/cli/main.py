"""``eks-inference``: the command-line entry point, wiring options to the command modules.

Commands import what they need when they run (boto3 for ``upload``/``preflight``,
matplotlib for ``plan --plot``, the chart renderer for ``manifests``), so starting the CLI
stays fast. Errors print as one line on stderr: exit code 2 for bad input, 1 for a failure.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from eks_inference import sizing
from eks_inference.aws_types import ZONE_PATTERN
from eks_inference.catalog import InstanceType, ModelArchitecture
from eks_inference.cli import console, inputs, plan_render
from eks_inference.cli import plan as planning
from eks_inference.cli.errors import BadInput, CommandFailed
from eks_inference.cli.plan import ConfigurationPlan
from eks_inference.cli.text import printable

DEFAULT_PLATFORM = Path("deployments.yaml")
# The upload defaults, here rather than in cli.upload so that --help does not import boto3:
# 64 MiB parts keep a 10 GB shard at ~160 parts (S3 allows 10,000), and 16 parallel
# transfers saturate a node's network without throttling from S3.
DEFAULT_PART_SIZE_MIB = 64
DEFAULT_CONCURRENCY = 16
# Each transfer holds a connection, a thread and (multipart) a part in memory. S3 serves about
# 100 MB/s per connection, so 64 at once already exceed a 25 Gb/s node's network several
# times over: more only adds sockets, threads and memory, and a typo such as 100000 would
# open thousands of connections.
MAX_CONCURRENCY = 64
# `models`: the key is read from the variable the OpenAI SDKs read; a connection to a load
# balancer opens within seconds or not at all; a model list is answered at once, so 30 s for
# the whole exchange leaves room for a cold load balancer and still stops a server that
# drips its answer a byte at a time.
DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"
DEFAULT_CONNECT_TIMEOUT_S = 5.0
DEFAULT_READ_TIMEOUT_S = 10.0
DEFAULT_DEADLINE_S = 30.0
_ZONE = re.compile(ZONE_PATTERN)


class _OneLineErrors(TyperGroup):
    """Print every usage error and failure as one ``error: ...`` line, without a traceback.

    Click's default shows the usage text and a hint around the message (several lines);
    scripts and CI logs read better with the message alone.
    """

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        except typer.TyperException as error:
            # Usage errors of the parser and this package's own errors alike; both may quote
            # what the user or a server gave (a file name with a newline, an escape), so the
            # message is made one printable line.
            console.echo(f"error: {printable(error.format_message())}", err=True)
            sys.exit(error.exit_code)
        except typer.Abort:
            typer.echo("error: aborted", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


class SchemaKind(StrEnum):
    DEPLOYMENT = "deployment"
    PLATFORM = "platform"


app = typer.Typer(
    name="eks-inference",
    cls=_OneLineErrors,
    help="Plan, upload and check LLM deployments on EKS (Inferentia2 and NVIDIA L40S).",
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback(invoke_without_command=True)
def _root(ctx: typer.Context) -> None:
    """Show the help when no command is given (as a normal exit, not a usage error)."""
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())


class UploadKind(StrEnum):
    """What an upload directory holds."""

    weights = "weights"
    artifacts = "artifacts"


PlatformOption = Annotated[
    Path, typer.Option("--platform", help="Platform file (node pools, bucket, deployments).")
]


def _emit(text: str, output: Path | None) -> None:
    """Print ``text``, or write it to ``output`` (creating its directory)."""
    if output is None:
        typer.echo(text, nl=not text.endswith("\n"))
        return
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text if text.endswith("\n") else text + "\n")
    except OSError as error:
        raise CommandFailed(f"cannot write {output}: {error.strerror or error}") from None
    typer.echo(f"wrote {output}", err=True)


@app.command()
def plan(
    platform: PlatformOption = DEFAULT_PLATFORM,
    model: Annotated[
        str | None, typer.Option(help="Size one configuration of this catalog model.")
    ] = None,
    instance_type: Annotated[str | None, typer.Option(help="Accelerator instance type.")] = None,
    tensor_parallel: Annotated[
        int | None, typer.Option(help="Tensor-parallel degree (NeuronCores or GPUs per replica).")
    ] = None,
    max_model_len: Annotated[
        int, typer.Option(help="Context length to size the KV cache for.")
    ] = planning.DEFAULT_MAX_MODEL_LEN,
    max_num_seqs: Annotated[
        int, typer.Option(help="Concurrent sequences (batch size).")
    ] = planning.DEFAULT_MAX_NUM_SEQS,
    price_per_hour: Annotated[
        float | None, typer.Option(help="Node price in USD/hour instead of the catalog's.")
    ] = None,
    measured_tokens_per_second: Annotated[
        float | None,
        typer.Option(help="Benchmarked tokens/s of one node, used for cost instead of the bound."),
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    markdown: Annotated[
        bool, typer.Option("--markdown", help="Print the platform plan as Markdown.")
    ] = False,
    output: Annotated[
        Path | None, typer.Option(help="Write the Markdown or JSON to this file.")
    ] = None,
    plot: Annotated[
        Path | None,
        typer.Option(help="Write a PNG of cost per 1M tokens against throughput (needs --model)."),
    ] = None,
    spot_price: Annotated[
        list[str] | None,
        typer.Option(
            help="TYPE=USD: spot price per hour of an instance type for SPOT pools, instead of "
            "the catalog's (repeatable)."
        ),
    ] = None,
) -> None:
    """Memory fit, decode throughput bound and cost: per deployment, or for one configuration."""
    for option, value in (
        ("--tensor-parallel", tensor_parallel),
        ("--max-model-len", max_model_len),
        ("--max-num-seqs", max_num_seqs),
        ("--price-per-hour", price_per_hour),
        ("--measured-tokens-per-second", measured_tokens_per_second),
    ):
        inputs.require_positive(option, value)
    if json_output and markdown:
        raise BadInput("choose one of --json and --markdown")
    if output is not None and not (json_output or markdown):
        raise BadInput("--output writes Markdown or JSON; add --markdown or --json")

    if model is None:
        given = [
            name
            for name, value in (
                ("--instance-type", instance_type),
                ("--tensor-parallel", tensor_parallel),
                ("--price-per-hour", price_per_hour),
                ("--measured-tokens-per-second", measured_tokens_per_second),
                ("--plot", plot),
            )
            if value is not None
        ]
        if given:
            raise BadInput(f"{_listed(given)} {'needs' if len(given) == 1 else 'need'} --model")
        platform_plan = planning.plan_platform(
            inputs.load_platform(platform), planning.parse_spot_prices(spot_price or [])
        )
        if json_output:
            _emit(json.dumps(platform_plan.as_json(), indent=2), output)
        elif markdown:
            _emit(plan_render.platform_markdown(platform_plan, platform.name), output)
        else:
            out = console.stdout()
            for table in plan_render.platform_tables(platform_plan):
                out.print(table)
            out.print(plan_render.BOUND_NOTE, soft_wrap=True)
        return

    if markdown:
        raise BadInput("--markdown plans the platform file; drop --model")
    if spot_price:
        raise BadInput("--spot-price prices the platform's SPOT pools; use --price-per-hour")
    model_name, entry = inputs.resolve_model(model)
    arch = entry.architecture
    selected = None
    does_not_fit = None
    if instance_type is not None or tensor_parallel is not None:
        if instance_type is None or tensor_parallel is None:
            raise BadInput("give both --instance-type and --tensor-parallel")
        instance = inputs.resolve_accelerator_instance(instance_type)
        problem = sizing.tensor_parallel_problem(arch, instance, tensor_parallel)
        if problem:
            usable = sizing.usable_tensor_parallel(arch, instance)
            raise BadInput(f"{problem}; usable for {model_name}: {list(usable) or 'none'}")
        selected = planning.plan_configuration(
            model_name,
            arch,
            instance,
            tensor_parallel,
            max_model_len,
            max_num_seqs,
            price_per_hour=price_per_hour,
            measured_tokens_per_second=measured_tokens_per_second,
        )
        if not selected.fits:
            does_not_fit = plan_render.does_not_fit(
                selected, _fitting_degree(selected, arch, instance)
            )
    elif price_per_hour is not None or measured_tokens_per_second is not None:
        given = [
            name
            for name, value in (
                ("--price-per-hour", price_per_hour),
                ("--measured-tokens-per-second", measured_tokens_per_second),
            )
            if value is not None
        ]
        raise BadInput(
            f"{_listed(given)} {'needs' if len(given) == 1 else 'need'} --instance-type and "
            "--tensor-parallel"
        )
    elif plot is None:
        raise BadInput("give --instance-type and --tensor-parallel, or --plot FILE.png")

    if plot is not None:
        _plot(model_name, arch, max_model_len, max_num_seqs, selected, plot, json_output, output)
    if selected is not None:
        if json_output:
            _emit(json.dumps(selected.as_json(), indent=2), output)
        else:
            console.stdout().print(plan_render.configuration_table(selected))
        if does_not_fit is not None:
            # The table (or JSON) shows by how much; a script must not take it for a plan.
            raise CommandFailed(does_not_fit)


def _fitting_degree(
    selected: ConfigurationPlan, arch: ModelArchitecture, instance: InstanceType
) -> int | None:
    """The smallest larger tensor-parallel degree at which ``selected`` would fit, if any."""
    for degree in sizing.usable_tensor_parallel(arch, instance):
        if (
            degree > selected.tensor_parallel_size
            and planning.plan_configuration(
                selected.model,
                arch,
                instance,
                degree,
                selected.max_model_len,
                selected.max_num_seqs,
            ).fits
        ):
            return degree
    return None


def _listed(options: Sequence[str]) -> str:
    """``--a``, ``--a and --b``, ``--a, --b and --c``: options named in a sentence."""
    if len(options) < 3:
        return " and ".join(options)
    return f"{', '.join(options[:-1])} and {options[-1]}"


def _plot(
    model_name: str,
    arch: ModelArchitecture,
    max_model_len: int,
    max_num_seqs: int,
    selected: ConfigurationPlan | None,
    path: Path,
    json_output: bool,
    output: Path | None,
) -> None:
    """Draw the candidates (and ``selected``); list them unless a configuration was given."""
    from eks_inference.cli import plot

    points = planning.candidates(model_name, arch, max_model_len, max_num_seqs)
    if not points and selected is None:
        raise CommandFailed(
            f"{model_name} fits on no catalog instance at max_model_len {max_model_len} and "
            f"max_num_seqs {max_num_seqs}; lower them"
        )
    figure = plot.cost_throughput_figure(
        points,
        title=f"{model_name}: cost vs decode throughput "
        f"(max_model_len {max_model_len}, max_num_seqs {max_num_seqs})",
        selected=selected,
    )
    try:
        plot.save_png(figure, path)
    except OSError as error:
        raise CommandFailed(f"cannot write {path}: {error.strerror or error}") from None
    typer.echo(f"wrote {path} ({len(points)} candidates)", err=True)
    if selected is None:
        if json_output:
            _emit(json.dumps([p.as_json() for p in points], indent=2), output)
        else:
            out = console.stdout()
            for point in points:
                out.print(
                    f"{point.label:24} {point.tokens_per_second:>10,.0f} tok/s "
                    f"${point.price_per_hour:>8,.2f}/h  ${point.cost_per_million_tokens:,.2f}/1M"
                )


@app.command()
def upload(
    local_dir: Annotated[Path, typer.Argument(help="Directory of weights or compiled artifacts.")],
    uri: Annotated[str, typer.Argument(help="Destination s3://BUCKET/PREFIX/ (trailing '/').")],
    kind: Annotated[
        UploadKind, typer.Option(help="weights (a Hugging Face model dir) or artifacts.")
    ] = UploadKind.weights,
    overwrite: Annotated[
        bool, typer.Option(help="Replace objects that differ from the local files.")
    ] = False,
    delete: Annotated[
        bool, typer.Option(help="Delete objects under the prefix that have no local file.")
    ] = False,
    part_size: Annotated[
        int, typer.Option(help="Multipart part size in MiB; larger files go multipart.")
    ] = DEFAULT_PART_SIZE_MIB,
    concurrency: Annotated[
        int, typer.Option(help=f"Parallel transfers and hashes, at most {MAX_CONCURRENCY}.")
    ] = DEFAULT_CONCURRENCY,
    profile: Annotated[str | None, typer.Option(help="AWS profile to use.")] = None,
) -> None:
    """Upload a directory to S3: resumable, checksummed, never overwriting unless asked."""
    from eks_inference.cli import aws
    from eks_inference.cli import upload as uploading
    from eks_inference.cli.progress import Advance, byte_progress
    from eks_inference.cli.s3uri import parse_prefix_uri
    from eks_inference.cli.text import format_bytes, plural
    from eks_inference.cli.upload_manifest import MANIFEST_NAME

    target = parse_prefix_uri(uri)
    inputs.require_positive("--concurrency", concurrency)
    if concurrency > MAX_CONCURRENCY:
        raise BadInput(
            f"--concurrency must be at most {MAX_CONCURRENCY}, got {concurrency}: that many "
            "parallel transfers already exceed a node's network bandwidth to S3"
        )
    if not uploading.MIN_PART_SIZE_MIB <= part_size <= uploading.MAX_PART_SIZE_MIB:
        raise BadInput(
            f"--part-size must be at least {uploading.MIN_PART_SIZE_MIB} MiB and at most "
            f"{uploading.MAX_PART_SIZE_MIB} MiB (S3's part size limits)"
        )
    scanned = uploading.scan_directory(local_dir, kind.value)
    uploading.check_keys(target, (f.relative for f in scanned.files))
    for link in scanned.links:
        console.echo(f"note: {link}", err=True)
    settings = uploading.UploadSettings(
        kind=kind.value,
        overwrite=overwrite,
        delete=delete,
        part_size_mib=part_size,
        concurrency=concurrency,
    )
    session = aws.connect(profile)
    # One connection per parallel transfer: botocore's default pool of 10 would make the
    # rest wait for a connection, or open and discard one per request.
    client = session.client("s3", max_connections=concurrency)
    deadlines = session.deadlines

    def start_upload(size: int) -> Advance:
        deadlines.allow_bytes(size)
        return progress.task("uploading", size)

    try:
        with uploading.sigterm_as_interrupt(), byte_progress(console.stderr()) as progress:
            hashing = progress.task("hashing", scanned.total_bytes)
            local = uploading.hash_files(scanned.files, concurrency, hashing)
            report = uploading.upload_directory(client, local, target, settings, start_upload)
    except CommandFailed as error:
        raise deadlines.failure(error) from None
    if report.took_over_from is not None:
        owner = report.took_over_from
        console.echo(
            f"note: took over the upload lease of host {owner.host}, pid {owner.pid}, which had "
            "expired or whose process is gone",
            err=True,
        )
    for key in report.deleted:
        console.echo(f"deleted {target.uri(key)}", err=True)
    if report.aborted_uploads:
        typer.echo(
            f"aborted {plural(len(report.aborted_uploads), 'multipart upload')} that an earlier "
            f"run left open under {target}",
            err=True,
        )
    manifest = "written" if report.manifest_written else "unchanged"
    typer.echo(
        f"uploaded {plural(len(report.uploaded), 'file')} ({format_bytes(report.bytes_uploaded)}), "
        f"skipped {len(report.skipped)} unchanged, "
        f"deleted {len(report.deleted)}{' (listed above)' if report.deleted else ''}; "
        f"manifest {manifest}: {target.uri(MANIFEST_NAME)}"
    )


@app.command()
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
    from eks_inference.cli import aws
    from eks_inference.cli import preflight as checks
    from eks_inference.cli.preflight_render import preflight_table

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
    session = aws.connect(profile)
    clients = checks.PreflightClients(
        s3=session.client("s3", spec.region),
        ec2=session.client("ec2", spec.region),
        service_quotas=session.client("service-quotas", spec.region),
    )
    results = checks.run_preflight(spec, clients, deployments=selected, zones=zones)
    console.stdout().print(preflight_table(results))
    failed = [r for r in results if r.failed]
    if failed:
        raise CommandFailed(f"{len(failed)} of {len(results)} preflight checks failed")


@app.command()
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

    from eks_inference.cli import endpoint

    target = endpoint.models_endpoint(url)
    key = None if no_api_key else endpoint.api_key_from(api_key_env)
    served = endpoint.list_models(
        target, key, connect_timeout=connect_timeout, read_timeout=read_timeout, deadline=deadline
    )
    if as_json:
        typer.echo(json.dumps([asdict(m) for m in served]))
    else:
        console.stdout().print(endpoint.models_table(target, served))
    if not served:
        raise CommandFailed(f"{target.url} serves no model")


@app.command()
def manifests(
    out: Annotated[
        Path,
        typer.Option(
            help="Directory to write the Kubernetes manifests to: new, empty, or written by "
            "this command before (only its own files there are replaced)."
        ),
    ],
    platform: PlatformOption = DEFAULT_PLATFORM,
    allow_other_files: Annotated[
        bool,
        typer.Option(
            "--allow-other-files",
            help="Write even though --out holds files this command did not write; they are "
            "left untouched.",
        ),
    ] = False,
) -> None:
    """Write every deployment's Kubernetes manifests (no AWS access needed)."""
    from eks_inference.cli.manifests import write
    from eks_inference.cli.text import plural

    spec = inputs.load_platform(platform)
    written = write(spec, platform, out, allow_other_files=allow_other_files)
    typer.echo(f"wrote {plural(len(written), 'manifest file')} to {out}")


@app.command()
def schema(
    kind: Annotated[
        SchemaKind, typer.Argument(help="deployment (one model) or platform (the whole file).")
    ] = SchemaKind.DEPLOYMENT,
) -> None:
    """Print the JSON Schema of a deployment spec or of a platform file, for editors and CI."""
    from eks_inference.spec.deployment import ModelDeploymentSpec
    from eks_inference.spec.platform import PlatformSpec

    model = ModelDeploymentSpec if kind is SchemaKind.DEPLOYMENT else PlatformSpec
    typer.echo(json.dumps(model.model_json_schema(), indent=2))


def main() -> None:
    """Console-script entry point (also ``python -m eks_inference``)."""
    app(prog_name="eks-inference")
