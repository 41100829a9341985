"""``InferenceStack``: the cluster, its add-ons and the model bucket for one ``PlatformSpec``."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Environment, Stack
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from eks_inference.constructs import InferenceAddons, InferenceCluster, ModelBucket
from eks_inference.platform import PlatformSpec


class InferenceStack(Stack):
    """Everything a :class:`PlatformSpec` describes, in one stack.

    Creates the :class:`ModelBucket` (named ``platform.model_bucket_name``, so the manifests
    in ``k8s_manifests/`` and the template agree), the :class:`InferenceCluster` with one
    node group per pool, and its :class:`InferenceAddons`. The Mountpoint driver is given
    read access to exactly the prefixes that the platform's Mountpoint volumes mount.

    The stack is environment-agnostic unless ``env`` is given; with an explicit region pass
    ``availability_zones`` too, so that no availability-zone lookup is needed at synth.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        platform: PlatformSpec,
        env: Environment | None = None,
        vpc: ec2.IVpc | None = None,
        availability_zones: Sequence[str] | None = None,
        admin_role_arn: str | None = None,
        public_access_cidrs: Sequence[str] | None = None,
        private_endpoint_only: bool = False,
        description: str | None = None,
    ) -> None:
        """Build the stack.

        :param platform: node pools, bucket name, Kubernetes version and deployments.
        :param env: account and region; default: environment-agnostic.
        :param vpc: an existing VPC for the cluster; default: a new one.
        :param availability_zones: zones of a new VPC (required in effect with ``env``).
        :param admin_role_arn: IAM role given cluster-admin through an access entry.
        :param public_access_cidrs: CIDRs allowed to reach the public API endpoint.
        :param private_endpoint_only: close the public API endpoint.
        :param description: CloudFormation stack description.
        """
        super().__init__(
            scope,
            construct_id,
            env=env,
            description=description
            or f"EKS inference platform {platform.cluster_name}: cluster, add-ons, model bucket",
        )
        self._zones = list(availability_zones) if availability_zones else None
        self.platform = platform
        self.model_bucket = ModelBucket(self, "ModelBucket", bucket_name=platform.model_bucket_name)
        self.cluster = InferenceCluster(
            self,
            "Inference",
            cluster_name=platform.cluster_name,
            node_pools=platform.node_pools,
            kubernetes_version=platform.kubernetes_version,
            vpc=vpc,
            availability_zones=availability_zones,
            admin_role_arn=admin_role_arn,
            public_access_cidrs=public_access_cidrs,
            private_endpoint_only=private_endpoint_only,
        )
        self.addons: InferenceAddons = self.cluster.add_addons(model_bucket=self.model_bucket)
        for prefix in self.mountpoint_prefixes(platform):
            self.addons.grant_mountpoint_read(prefix)

    @property
    def availability_zones(self) -> list[str]:
        """The given zones; otherwise CDK's (which, in a stack with a region, is a lookup).

        ``ec2.Vpc`` reads this even when it is given explicit zones, and in a stack with a
        fixed environment the default implementation records a context lookup that the CDK
        CLI would resolve with AWS credentials.
        """
        if self._zones is not None:
            return list(self._zones)
        zones: list[str] = super().availability_zones
        return zones

    @staticmethod
    def mountpoint_prefixes(platform: PlatformSpec) -> list[str]:
        """Bucket prefixes mounted through Mountpoint: weights, and compiled Neuron artifacts."""
        prefixes: list[str] = []
        for deployment in platform.deployments:
            if deployment.weights.loader != "mountpoint":
                continue
            prefixes.append(deployment.weights.prefix)
            artifacts = deployment.neuron_options.compiled_artifacts_prefix
            if deployment.on_neuron and artifacts:
                prefixes.append(artifacts)
        return sorted(set(prefixes))
