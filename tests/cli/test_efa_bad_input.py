"""Node pools with ``efa`` the CLI refuses: exit 2, one line, the field and the fix.

EFA on an instance type that has none, and EFA on a pool across zones (the nodes share one
cluster placement group, which lives in one Availability Zone).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.cli import run_cli
from tests.helpers.errors import one_line_error
from tests.helpers.platforms import REPO, platform_data

EXAMPLE = REPO / "examples" / "multi-node.yaml"
Edit = Callable[[dict[str, Any]], None]


def _on_an_instance_without_efa(data: dict[str, Any]) -> None:
    data["node_pools"].append(
        {
            "name": "g6e-small",
            "instance_types": ["g6e.4xlarge"],
            "max_size": 2,
            "zones": [0],
            "efa": True,
        }
    )


def _across_zones(data: dict[str, Any]) -> None:
    data["node_pools"].append(
        {
            "name": "g6e-wide",
            "instance_types": ["g6e.24xlarge"],
            "max_size": 2,
            "zones": [0, 1],
            "efa": True,
        }
    )


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        pytest.param(
            _on_an_instance_without_efa,
            (
                "node_pools.3: efa: g6e.4xlarge has no Elastic Fabric Adapter; remove efa or use "
                "an instance type with EFA (",
                "p5.48xlarge",
            ),
            id="efa-on-an-instance-without-it",
        ),
        pytest.param(
            _across_zones,
            (
                "node_pools.3: efa: the nodes of a pool with EFA share one cluster placement group",
                "set zones: [0]",
            ),
            id="efa-across-zones",
        ),
    ],
)
@pytest.mark.parametrize("provisioning", ["managed", "karpenter"])
def test_bad_efa_pool(
    tmp_path: Path, edit: Edit, expected: tuple[str, ...], provisioning: str
) -> None:
    data = platform_data(EXAMPLE)
    if provisioning == "karpenter":
        data["node_provisioning"] = "karpenter"
    edit(data)
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    one_line_error(run_cli("plan", "--platform", path, cwd=tmp_path), 2, *expected)
