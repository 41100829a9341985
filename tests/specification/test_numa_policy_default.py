"""The topology manager policy a node pool runs by default follows from what it hosts.

Llama-3.1-70B at ``tensor_parallel_size: 8`` on a plain g6e.48xlarge pool, what most guides
deploy, spans both NUMA nodes: the pool runs ``restricted`` (which admits the replica on the
fewest nodes) instead of its family's ``single-numa-node`` (which would refuse its pods), and
``plan`` says so, with the cost. A pool hosting only replicas that fit one NUMA node keeps
its family's policy, and a policy set on the pool wins and is checked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from eks_inference.charts.node_bootstrap import kubelet_config
from eks_inference.specification.numa import family_policy, pool_policy
from eks_inference.specification.platform import PlatformSpec
from eks_inference.specification.provisioning import NodeProvisioning
from tests.helpers.cli import run_cli
from tests.helpers.errors import one_line_error
from tests.helpers.platforms import EXAMPLES, REFERENCE_PLATFORM


def _platform(degree: int, model: str = "llama-3.1-70b", **pool: Any) -> dict[str, Any]:
    return {
        "model_bucket_name": "eks-inference-models-example",
        "node_pools": [
            {"name": "system", "instance_types": ["m6i.2xlarge"], "min_size": 1},
            {"name": "g6e48", "instance_types": ["g6e.48xlarge"], "max_size": 2, **pool},
        ],
        "deployments": [
            {
                "name": "llama-70b",
                "model": model,
                "instance_type": "g6e.48xlarge",
                "engine": "vllm",
                "tensor_parallel_size": degree,
                "limits": {"max_model_len": 8192, "max_num_seqs": 16},
                "weights": {"prefix": "models/llama/", "loader": "runai_streamer"},
            }
        ],
    }


def test_a_pool_hosting_a_replica_across_numa_nodes_runs_restricted() -> None:
    platform = PlatformSpec.model_validate(_platform(8))
    pool = platform.node_pools[1]
    policy = pool_policy(pool)
    assert policy is not None
    assert policy.policy == "restricted"
    assert policy.reason.startswith("chosen for a replica it hosts that no NUMA node holds")
    assert kubelet_config(pool)["topologyManagerPolicy"] == "restricted"
    # Chosen, not set: a platform dumped without defaults chooses it again when read.
    assert "topology_manager_policy" not in pool.model_fields_set
    again = platform.with_node_provisioning(NodeProvisioning.KARPENTER)
    assert again.node_pools[1].topology_manager_policy == "restricted"
    assert platform.placement(platform.deployments[0]).workers is pool


def test_plan_says_which_policy_it_chose_and_what_it_costs(tmp_path: Path) -> None:
    (note,) = PlatformSpec.model_validate(_platform(8)).topology_policy_notes()
    assert note.startswith(
        "pool 'g6e48' runs topology_manager_policy: restricted, not its family's "
        "single-numa-node, for deployments 'llama-70b': a replica of 8 L40S"
    )
    assert "the cost: PCIe-only GPUs: a replica across sockets pays the inter-socket link" in note
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(_platform(8)))
    completed = run_cli("plan", "--platform", path, "--json", cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    assert "pool 'g6e48' runs topology_manager_policy: restricted" in completed.stdout


def test_a_pool_whose_replicas_fit_one_numa_node_keeps_its_familys_policy() -> None:
    data = _platform(4, model="llama-3-8b")
    platform = PlatformSpec.model_validate(data)
    pool = platform.node_pools[1]
    assert pool.topology_manager_policy is None
    assert pool_policy(pool) == family_policy(pool.instance)
    assert platform.topology_policy_notes() == ()


def test_an_explicit_single_numa_node_policy_still_refuses_the_replica(tmp_path: Path) -> None:
    data = _platform(8, topology_manager_policy="single-numa-node")
    with pytest.raises(ValidationError) as caught:
        PlatformSpec.model_validate(data)
    (error,) = caught.value.errors()
    assert error["loc"] == ("deployments", 0, "tensor_parallel_size")
    assert "pool 'g6e48' admits only pods on one NUMA node" in error["msg"]
    assert "topology_manager_policy: restricted on node_pools.1" in error["msg"]
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(data))
    one_line_error(
        run_cli("plan", "--platform", path, cwd=tmp_path),
        2,
        "deployments.0.tensor_parallel_size",
        "topology_manager_policy: restricted on node_pools.1",
    )


def test_an_explicit_policy_is_kept_and_not_reported_as_chosen() -> None:
    platform = PlatformSpec.model_validate(_platform(8, topology_manager_policy="best-effort"))
    policy = pool_policy(platform.node_pools[1])
    assert policy is not None
    assert (policy.policy, policy.reason) == ("best-effort", "set on the pool")
    assert platform.topology_policy_notes() == ()


@pytest.mark.parametrize("path", [REFERENCE_PLATFORM, *EXAMPLES], ids=lambda p: p.name)
def test_the_reference_platforms_pools_come_out_as_written(path: Path) -> None:
    """Their replicas fit one NUMA node (or their family spans nodes anyway): every pool is
    the pool the file describes, on its family's policy or its own."""
    data = yaml.safe_load(path.read_text())
    platform = PlatformSpec.model_validate(data)
    for given, pool in zip(data["node_pools"], platform.node_pools, strict=True):
        assert pool.topology_manager_policy == given.get("topology_manager_policy")
    assert platform.topology_policy_notes() == ()
