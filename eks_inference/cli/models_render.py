"""The models an endpoint serves, as a rich table."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from eks_inference.ops.served_models import Endpoint, ServedModel


def models_table(endpoint: Endpoint, models: list[ServedModel]) -> Table:
    """The served models, one row each, under a title naming the endpoint; a LoRA adapter
    names the base model it adapts."""
    table = Table(title=f"{endpoint.url}: {len(models)} served", title_justify="left")
    table.add_column("model", no_wrap=True)
    table.add_column("owned by", no_wrap=True)
    table.add_column("max model len", justify="right", no_wrap=True)
    table.add_column("adapter of", no_wrap=True)
    for model in models:
        table.add_row(
            escape(model.id),
            escape(model.owned_by or "-"),
            "-" if model.max_model_len is None else f"{model.max_model_len:,}",
            escape(model.parent or "-"),
        )
    return table
