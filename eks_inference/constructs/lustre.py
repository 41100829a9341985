"""``ModelFileSystem``: the FSx for Lustre file system a deployment reads its weights from.

A Lustre file system lives in one subnet, so in one Availability Zone: the stack creates it in
the zone of the deployment's node pool (the spec refuses a pool spanning more), sized from the
model (:func:`~eks_inference.specification.weights.lustre_capacity_gib`), and links its ``/model``
directory to the deployment's prefix of the model bucket with a data repository association,
which imports the objects' metadata at once and their contents on first read, and follows new,
changed and deleted objects.
"""

from __future__ import annotations

from functools import cache

from aws_cdk import RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from constructs import Construct, IConstruct

from eks_inference import versions
from eks_inference.charts.context import LustreMount
from eks_inference.charts.weights_loaders import LUSTRE_WEIGHTS_DIRECTORY
from eks_inference.constructs.cluster import InferenceCluster
from eks_inference.constructs.model_bucket import ModelBucket
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.platform import Placement
from eks_inference.specification.startup_budget import weights_gib
from eks_inference.specification.weights import lustre_capacity_gib, lustre_throughput_per_tib


@cache
def lustre_ports() -> tuple[ec2.Port, ec2.Port]:
    """Lustre's ports (FSx for Lustre user guide, "File system access control with Amazon
    VPC"): 988 for LNet, 1018-1023 for the connections clients and servers open between
    themselves. Made on first use, not on import: most apps have no Lustre file system, and
    each port is a call into Node.js."""
    return ec2.Port.tcp(988), ec2.Port.tcp_range(1018, 1023)


class ModelFileSystem(Construct):
    """The FSx for Lustre file system of one ``loader: fsx`` deployment, created or imported.

    Created (no ``weights.fsx.file_system_id``):

    * a security group admitting Lustre's ports (988, 1018-1023) from the cluster's nodes
      (the cluster security group, which managed node groups and Karpenter's nodes carry) and
      from the file system's own servers, and sending only to them: nothing else reaches it;
    * an ``AWS::FSx::FileSystem`` of type ``PERSISTENT_2`` (Lustre
      ``versions.LUSTRE_VERSION``, SSD, encrypted at rest with the FSx service key) in the
      private subnet of the pool's one zone, with the spec's (or the model's) capacity and
      throughput per TiB; removed with the stack, since its content is a copy of the bucket's;
    * an ``AWS::FSx::DataRepositoryAssociation`` linking ``/model`` to
      ``s3://<bucket>/<prefix>``: metadata imported on creation, contents loaded on first
      read, and new, changed and deleted objects followed (the bucket stays the source of
      truth; nothing is exported back). FSx reads the bucket with its service-linked role.
    * the template's ``cfn-lint`` metadata naming ``region``: FSx for Lustre is not offered
      in every region, and the template deploys to the bucket's.

    Imported: nothing is created, and you own the file system's association of the weights
    with its ``/model`` directory. :attr:`mount` is what the charts' PersistentVolume needs
    either way; :attr:`dependencies` what it is applied after.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: InferenceCluster,
        bucket: ModelBucket,
        spec: ModelDeploymentSpec,
        placement: Placement,
        region: str,
    ) -> None:
        super().__init__(scope, construct_id)
        lustre = spec.weights.lustre
        gib = weights_gib(spec)
        capacity = lustre_capacity_gib(lustre, gib)
        self.dependencies: tuple[IConstruct, ...] = ()
        if lustre.file_system_id is not None:
            self.mount = LustreMount(
                file_system_id=lustre.file_system_id,
                dns_name=lustre.dns_name or "",
                mount_name=lustre.mount_name or "",
                capacity_gib=capacity,
            )
            return
        if bucket.encryption_key is not None:
            raise ValueError(
                f"deployment {spec.name!r}: FSx for Lustre reads the model bucket with its "
                "service-linked role, which the bucket's KMS key does not grant; use an "
                "SSE-S3 bucket, or import a file system (weights.fsx.file_system_id) whose "
                "association you have authorized"
            )
        (subnet,) = cluster.zone_subnets(placement.workers)
        # FSx for Lustre is not offered in every region: the template says which region it
        # is for (the bucket's, which ModelDeployment requires literally), for cfn-lint.
        Stack.of(self).add_metadata("cfn-lint", {"config": {"regions": [region]}})
        nodes = cluster.cluster.cluster_security_group
        self.security_group = ec2.SecurityGroup(
            self,
            "SecurityGroup",
            vpc=cluster.vpc,
            allow_all_outbound=False,
            description=f"FSx for Lustre of {spec.name}: Lustre from the cluster nodes only",
        )
        # aws_fsx is loaded only by apps with a Lustre file system.
        from aws_cdk import aws_fsx as fsx

        for port in lustre_ports():
            for peer in (nodes, self.security_group):
                self.security_group.add_ingress_rule(peer, port, "Lustre")
                self.security_group.add_egress_rule(peer, port, "Lustre")
        self.file_system = fsx.CfnFileSystem(
            self,
            "FileSystem",
            file_system_type="LUSTRE",
            file_system_type_version=versions.LUSTRE_VERSION,
            storage_type="SSD",
            storage_capacity=capacity,
            subnet_ids=[subnet.subnet_id],
            security_group_ids=[self.security_group.security_group_id],
            lustre_configuration=fsx.CfnFileSystem.LustreConfigurationProperty(
                deployment_type=lustre.deployment_type,
                per_unit_storage_throughput=lustre_throughput_per_tib(lustre, gib),
                # Safetensors are already dense: compression would cost CPU for nothing.
                data_compression_type="NONE",
            ),
        )
        self.file_system.apply_removal_policy(RemovalPolicy.DESTROY)
        self.association = fsx.CfnDataRepositoryAssociation(
            self,
            "Association",
            file_system_id=self.file_system.ref,
            file_system_path=f"/{LUSTRE_WEIGHTS_DIRECTORY}",
            data_repository_path=f"s3://{bucket.bucket_name}/{spec.weights.prefix}",
            batch_import_meta_data_on_create=True,
            s3=fsx.CfnDataRepositoryAssociation.S3Property(
                auto_import_policy=fsx.CfnDataRepositoryAssociation.AutoImportPolicyProperty(
                    events=["NEW", "CHANGED", "DELETED"]
                )
            ),
        )
        self.mount = LustreMount(
            file_system_id=self.file_system.ref,
            dns_name=self.file_system.attr_dns_name,
            mount_name=self.file_system.attr_lustre_mount_name,
            capacity_gib=capacity,
        )
        self.dependencies = (self.file_system, self.association)
