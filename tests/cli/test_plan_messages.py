"""How ``plan`` words its usage errors and lays out its help (issue 17, item 12)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import typer
from typer.core import TyperGroup
from typer.testing import CliRunner, Result

from eks_inference.cli.main import app

Cli = Callable[..., Result]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--plot", "x.png"), "--plot needs --model"),
        (
            ("--instance-type", "inf2.48xlarge", "--plot", "x.png"),
            "--instance-type and --plot need --model",
        ),
        (
            ("--instance-type", "inf2.48xlarge", "--tensor-parallel", "8", "--plot", "x.png"),
            "--instance-type, --tensor-parallel and --plot need --model",
        ),
    ],
)
def test_options_that_need_a_model_are_named_in_a_sentence(
    cli: Cli, args: tuple[str, ...], expected: str
) -> None:
    result = cli("plan", *args)
    assert result.exit_code == 2
    assert result.stderr == f"error: {expected}\n"


def test_a_price_alone_names_itself_and_what_it_needs(cli: Cli) -> None:
    result = cli("plan", "--model", "llama-3-8b", "--price-per-hour", "3")
    assert result.exit_code == 2
    assert result.stderr == (
        "error: --price-per-hour needs --instance-type and --tensor-parallel\n"
    )


def test_plan_help_at_80_columns_shows_every_flag_whole() -> None:
    result = CliRunner().invoke(app, ["plan", "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0
    command = typer.main.get_command(app)
    assert isinstance(command, TyperGroup)
    plan = command.commands["plan"]
    flags = [flag for param in plan.params for flag in param.opts if flag.startswith("--")]
    assert "--measured-tokens-per-second" in flags
    assert [flag for flag in flags if flag not in result.stdout] == []
    assert "…" not in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
