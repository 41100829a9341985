"""``plan``: memory fit, decode throughput bound and cost, per deployment of the platform file
or for one configuration, as tables, Markdown, JSON or a plot.

The numbers come from :mod:`eks_inference.ops.plan`; this module checks the options, chooses
the output and prints it. matplotlib, the ``plot`` extra (``pip install
'eks-inference[plot]'``), is imported only for ``--plot`` and ``--cold-start-plot``; without
it they fail at once with one line saying how to install it.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from eks_inference.catalog import sizing
from eks_inference.cli import console, inputs, plan_cells
from eks_inference.cli.options import DEFAULT_PLATFORM, PlatformOption
from eks_inference.cli.output import emit
from eks_inference.ops.errors import BadInput, CommandFailed
from eks_inference.specification.deployment import Limits

if TYPE_CHECKING:
    from eks_inference.ops.plan import PlatformPlan


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
    ] = Limits().max_model_len,
    max_num_seqs: Annotated[
        int, typer.Option(help="Concurrent sequences (batch size).")
    ] = Limits().max_num_seqs,
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
        typer.Option(
            help="Write a PNG of cost per 1M tokens against throughput (needs --model and the "
            "plot extra)."
        ),
    ] = None,
    cold_start_plot: Annotated[
        Path | None,
        typer.Option(
            help="Write a PNG of each deployment's cold start per loader (the platform file; "
            "needs the plot extra)."
        ),
    ] = None,
    spot_price: Annotated[
        list[str] | None,
        typer.Option(
            help="TYPE=USD: spot price per hour of an instance type for SPOT pools, instead of "
            "the catalog's (repeatable)."
        ),
    ] = None,
    idle_hours: Annotated[
        float | None,
        typer.Option(
            help="Hours a day without requests, for what deployments that scale to zero save "
            "(the platform file; default 12)."
        ),
    ] = None,
) -> None:
    """Memory fit, decode throughput bound and cost: per deployment, or for one configuration."""
    # Its tables need rich, which the other commands do not load at start-up.
    from eks_inference.cli import configuration_render, plan_render

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
    if cold_start_plot is not None and model is not None:
        raise BadInput("--cold-start-plot plans the platform file's deployments; drop --model")
    if output is not None and not (json_output or markdown):
        raise BadInput("--output writes Markdown or JSON; add --markdown or --json")
    for option, picture in (("--plot", plot), ("--cold-start-plot", cold_start_plot)):
        if picture is not None:
            _require_plotting(option)

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
        spec = inputs.load_platform(platform)
        # Imported once the input is read: a file refused before it is planned costs no more.
        from eks_inference.ops import plan as planning
        from eks_inference.ops.scale_to_zero import DEFAULT_IDLE_HOURS, require_idle_hours

        idle = require_idle_hours(DEFAULT_IDLE_HOURS if idle_hours is None else idle_hours)
        platform_plan = planning.plan_platform(
            spec, planning.parse_spot_prices(spot_price or []), idle
        )
        if cold_start_plot is not None:
            _plot_cold_starts(platform_plan, platform, cold_start_plot)
        if json_output:
            emit(json.dumps(platform_plan.as_json(), indent=2), output)
        elif markdown:
            emit(plan_render.platform_markdown(platform_plan, platform.name), output)
        else:
            out = console.stdout()
            for table in plan_render.platform_tables(platform_plan):
                out.print(table)
            out.print(plan_cells.BOUND_NOTE, soft_wrap=True)
            out.print(plan_cells.COLD_START_NOTE, soft_wrap=True)
            if any(d.scale_to_zero for d in platform_plan.deployments):
                out.print(plan_cells.SCALE_TO_ZERO_NOTE, soft_wrap=True)
        return

    if markdown:
        raise BadInput("--markdown plans the platform file; drop --model")
    if spot_price:
        raise BadInput("--spot-price prices the platform's SPOT pools; use --price-per-hour")
    if idle_hours is not None:
        raise BadInput("--idle-hours prices the platform's deployments that scale to zero")
    model_name, entry = inputs.resolve_model(model)
    from eks_inference.ops import plan as planning

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
            does_not_fit = configuration_render.does_not_fit(
                selected, planning.fitting_degree(selected, arch, instance)
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
        from eks_inference.cli import plot as plotting

        plotting.plot_candidates(
            model_name, arch, max_model_len, max_num_seqs, selected, plot, json_output, output
        )
    if selected is not None:
        if json_output:
            emit(json.dumps(selected.as_json(), indent=2), output)
        else:
            console.stdout().print(configuration_render.configuration_table(selected))
        if does_not_fit is not None:
            # The table (or JSON) shows by how much; a script must not take it for a plan.
            raise CommandFailed(does_not_fit)


def _require_plotting(option: str) -> None:
    """Fail with the install command when ``option`` asks for a picture and the plotting stack
    (the ``plot`` extra) cannot be imported; checked before anything is planned."""
    try:
        importlib.import_module("matplotlib")
    except ModuleNotFoundError as error:
        raise BadInput(
            f"{option} draws with matplotlib, which is not installed (no module named "
            f"{error.name!r}); install the plot extra: pip install 'eks-inference[plot]' "
            "(from a checkout: pip install -e '.[plot]')"
        ) from None


def _plot_cold_starts(plan: PlatformPlan, platform: Path, path: Path) -> None:
    from eks_inference.cli import cold_start_plot
    from eks_inference.cli.plot import save_png

    figure = cold_start_plot.cold_start_figure(
        plan.deployments, title=f"{platform.name}: cold start per loader"
    )
    try:
        save_png(figure, path)
    except OSError as error:
        raise CommandFailed(f"cannot write {path}: {error.strerror or error}") from None
    typer.echo(f"wrote {path} ({len(plan.deployments)} deployments)", err=True)


def _listed(options: Sequence[str]) -> str:
    """``--a``, ``--a and --b``, ``--a, --b and --c``: options named in a sentence."""
    if len(options) < 3:
        return " and ".join(options)
    return f"{', '.join(options[:-1])} and {options[-1]}"
