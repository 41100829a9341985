"""Cluster add-ons: device plugins, the Neuron scheduler, KubeRay, Mountpoint for S3, autoscaling.

Every chart and add-on version comes from :mod:`eks_inference.versions`; every node selector
and toleration comes from the cluster's node pools. Helm charts are fetched by the kubectl
Lambda at deploy time, never at synth.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from aws_cdk import Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct, IConstruct

from eks_inference import names, versions
from eks_inference.catalog import Accelerator
from eks_inference.constructs._nag import acknowledge, wildcard_resource_finding
from eks_inference.constructs.cluster import InferenceCluster
from eks_inference.constructs.model_bucket import ModelBucket
from eks_inference.constructs.nodegroups import CLUSTER_AUTOSCALER_TAG_PREFIX
from eks_inference.spec.node_pools import NodePool

SYSTEM_NAMESPACE = "kube-system"
CLUSTER_AUTOSCALER_SERVICE_ACCOUNT = "cluster-autoscaler"
# The custom resources the KubeRay operator chart installs (skip_crds=False).
_KUBERAY_CRDS = (
    names.RAYSERVICE_CRD,
    "rayclusters.ray.io",
    "rayjobs.ray.io",
    "raycronjobs.ray.io",
)
# Both device plugin charts also tolerate this (deprecated but still honoured) taint.
_CRITICAL_ADDONS_TOLERATION = {"key": "CriticalAddonsOnly", "operator": "Exists"}


def _pools(pools: Iterable[NodePool], accelerator: Accelerator) -> list[NodePool]:
    return [p for p in pools if p.accelerator is accelerator]


def pool_tolerations(pools: Iterable[NodePool]) -> list[dict[str, str]]:
    unique: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}
    for pool in pools:
        for toleration in pool.tolerations():
            unique[tuple(sorted(toleration.items()))] = toleration
    return [_CRITICAL_ADDONS_TOLERATION, *unique.values()]


def pool_affinity(pools: Sequence[NodePool]) -> dict[str, Any]:
    """Required node affinity matching every label of any one of ``pools``."""
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": key, "operator": "In", "values": [value]}
                            for key, value in sorted(pool.labels.items())
                        ]
                    }
                    for pool in pools
                ]
            }
        }
    }


def helm_chart(
    scope: Construct,
    cluster: InferenceCluster,
    construct_id: str,
    pinned: versions.HelmChartVersion,
    **options: Any,
) -> eks.HelmChart:
    """A Helm release of ``pinned`` (chart, repository and version from versions.py) on
    ``cluster``, in ``scope``; the kubectl Lambda fetches the chart at deploy time."""
    return eks.HelmChart(
        scope,
        construct_id,
        cluster=cluster.eks_cluster,
        chart=pinned.chart,
        repository=pinned.repository,
        version=pinned.version,
        **options,
    )


class InferenceAddons(Construct):
    """The add-ons an inference cluster needs, ordered explicitly.

    * **Neuron** (``versions.NEURON_HELM_CHART``, only with Neuron pools): the device plugin
      DaemonSet on Neuron instance types only, tolerating the Neuron taint; the scheduler
      extension and a second kube-scheduler named ``names.NEURON_SCHEDULER_NAME``, which
      places a pod on contiguous NeuronCores (needed when a pod takes some cores of a node);
      and the Neuron node problem detector. The schedulers run on the system pool, with a
      kube-scheduler image of the cluster's Kubernetes version.
    * **NVIDIA device plugin** (only with GPU pools): on the GPU pools only, by node affinity
      on their labels (including ``nvidia.com/gpu.present=true``) and their taint.
    * **KubeRay operator** with its CRDs, on the system pool.
    * **Mountpoint for S3 CSI driver** (EKS add-on) with a Pod Identity association for its
      service account. Its role reads the model bucket by prefix only
      (:meth:`grant_mountpoint_read`); the driver serves every Mountpoint volume of the
      cluster, so it needs the union of the prefixes that volumes mount.
    * **Cluster Autoscaler** on the system pool, discovering node groups by their tags, with
      a least-privilege Pod Identity role (scaling actions only on this cluster's groups);
      not with ``node_provisioning="karpenter"``, where Karpenter provisions the nodes.

    Charts that use Pod Identity depend on the Pod Identity Agent; the Mountpoint add-on too.
    Model deployments take this object as a parameter: what they need from it (the operator
    that installs a custom resource, :meth:`crd_installer`; the Mountpoint driver's read
    access, :meth:`grant_mountpoint_read` and :attr:`mountpoint_dependencies`) is asked for
    explicitly, so a deployment cannot be created before the add-ons it depends on.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: InferenceCluster,
        model_bucket: ModelBucket,
    ) -> None:
        super().__init__(scope, construct_id)
        self._cluster = cluster
        self._model_bucket = model_bucket
        self._mountpoint_prefixes: set[str] = set()
        system = cluster.system_pool
        self.neuron_chart = self._add_neuron(cluster, system)
        self.nvidia_device_plugin_chart = self._add_nvidia(cluster)
        self.kuberay_operator_chart = self._add_kuberay(cluster, system)
        self.mountpoint_role, self.mountpoint_addon = self._add_mountpoint(cluster)
        # With Karpenter, Karpenter adds and removes the nodes (KarpenterNodeProvisioning);
        # a Cluster Autoscaler beside it would fight it over the system node group.
        self.cluster_autoscaler_role: iam.Role | None = None
        self.cluster_autoscaler_chart: eks.HelmChart | None = None
        if cluster.node_provisioning == "managed":
            self.cluster_autoscaler_role, self.cluster_autoscaler_chart = self._add_autoscaler(
                cluster, system
            )
        self._crd_installers: dict[str, IConstruct] = dict.fromkeys(
            _KUBERAY_CRDS, self.kuberay_operator_chart
        )

    def crd_installer(self, crd: str) -> IConstruct:
        """The add-on that installs the CustomResourceDefinition ``crd``; apply after it."""
        try:
            return self._crd_installers[crd]
        except KeyError:
            raise KeyError(
                f"no add-on of this cluster installs the custom resource {crd!r}; installed: "
                f"{', '.join(sorted(self._crd_installers))}"
            ) from None

    @property
    def mountpoint_dependencies(self) -> tuple[IConstruct, ...]:
        """What a Mountpoint volume must be applied after: the driver and its role's policy."""
        return (self.mountpoint_addon, self.mountpoint_role)

    def _helm_chart(
        self,
        cluster: InferenceCluster,
        construct_id: str,
        pinned: versions.HelmChartVersion,
        **options: Any,
    ) -> eks.HelmChart:
        """A Helm release of ``pinned`` (chart, repository and version from versions.py)."""
        return helm_chart(self, cluster, construct_id, pinned, **options)

    def register_crd_installer(self, crds: Iterable[str], installer: IConstruct) -> None:
        """Record that ``installer`` (an add-on created elsewhere) installs ``crds``.

        Add-ons of other constructs (the observability stack) register here, so that
        :meth:`crd_installer` answers for every custom resource the cluster has, whoever
        installs it; a CRD has one installer.
        """
        for crd in crds:
            existing = self._crd_installers.get(crd)
            if existing is not None and existing is not installer:
                raise ValueError(f"custom resource {crd!r} already has an installer")
            self._crd_installers[crd] = installer

    def installs(self, crds: Iterable[str]) -> bool:
        """True when an add-on of this cluster installs every one of ``crds``."""
        return all(crd in self._crd_installers for crd in crds)

    def grant_mountpoint_read(self, prefix: str) -> None:
        """Let the Mountpoint driver read ``prefix`` of the model bucket (idempotent)."""
        if prefix in self._mountpoint_prefixes:
            return
        self._mountpoint_prefixes.add(prefix)
        self._model_bucket.grant_read_prefix(self.mountpoint_role, prefix)

    def _add_neuron(self, cluster: InferenceCluster, system: NodePool) -> eks.HelmChart | None:
        pools = _pools(cluster.node_pools, Accelerator.NEURON)
        if not pools:
            return None
        chart = versions.NEURON_HELM_CHART
        on_system = {"nodeSelector": system.node_selector(), "tolerations": system.tolerations()}
        return self._helm_chart(
            cluster,
            "Neuron",
            chart,
            release="neuron",
            namespace=SYSTEM_NAMESPACE,
            values={
                # The device plugin and the problem detector select nodes by these types.
                "neuronInstances": sorted({t for p in pools for t in p.instance_types}),
                "devicePlugin": {"tolerations": pool_tolerations(pools)},
                "scheduler": {
                    "enabled": True,
                    **on_system,
                    "customScheduler": {
                        "enabled": True,
                        "fullnameOverride": names.NEURON_SCHEDULER_NAME,
                        "image": {
                            "repository": versions.KUBE_SCHEDULER_IMAGE,
                            "tag": cluster.release.kube_scheduler_image_tag,
                        },
                        **on_system,
                    },
                },
                # Everything in kube-system: the chart does not create the detector's own
                # default namespace.
                "npd": {"namespaceOverride": SYSTEM_NAMESPACE},
            },
        )

    def _add_nvidia(self, cluster: InferenceCluster) -> eks.HelmChart | None:
        pools = _pools(cluster.node_pools, Accelerator.NVIDIA)
        if not pools:
            return None
        chart = versions.NVIDIA_DEVICE_PLUGIN_CHART
        return self._helm_chart(
            cluster,
            "NvidiaDevicePlugin",
            chart,
            release="nvidia-device-plugin",
            namespace=SYSTEM_NAMESPACE,
            values={
                "affinity": pool_affinity(pools),
                "tolerations": pool_tolerations(pools),
            },
        )

    def _add_kuberay(self, cluster: InferenceCluster, system: NodePool) -> eks.HelmChart:
        chart = versions.KUBERAY_OPERATOR_CHART
        return self._helm_chart(
            cluster,
            "KubeRayOperator",
            chart,
            release="kuberay-operator",
            namespace=names.KUBERAY_NAMESPACE,
            create_namespace=True,
            # The RayCluster/RayService/RayJob CRDs come with the chart.
            skip_crds=False,
            values={
                "image": {"tag": versions.KUBERAY_OPERATOR_IMAGE_TAG},
                "nodeSelector": system.node_selector(),
                "tolerations": system.tolerations(),
            },
        )

    def _add_mountpoint(self, cluster: InferenceCluster) -> tuple[iam.Role, eks.Addon]:
        role = iam.Role(
            self,
            "MountpointRole",
            assumed_by=cluster.pods_principal,
            description=(
                f"Mountpoint for S3 CSI driver of EKS cluster {cluster.cluster_name}: reads "
                "model bucket prefixes"
            ),
        )
        addon = cluster.add_eks_addon(
            "MountpointS3Csi",
            addon_name="aws-mountpoint-s3-csi-driver",
            addon_version=versions.MOUNTPOINT_S3_CSI_ADDON_VERSION,
            identity=(role, names.MOUNTPOINT_SERVICE_ACCOUNT),
            scope=self,
        )
        return role, addon

    def _add_autoscaler(
        self, cluster: InferenceCluster, system: NodePool
    ) -> tuple[iam.Role, eks.HelmChart]:
        identity = cluster.add_pod_identity(
            "ClusterAutoscaler",
            namespace=SYSTEM_NAMESPACE,
            service_account=CLUSTER_AUTOSCALER_SERVICE_ACCOUNT,
            description=f"Cluster Autoscaler of EKS cluster {cluster.cluster_name}",
        )
        role = identity.role
        stack = Stack.of(self)
        # Describe calls cannot be limited to resources; they reveal no data plane content.
        role.add_to_policy(
            iam.PolicyStatement(
                actions=[
                    "autoscaling:DescribeAutoScalingGroups",
                    "autoscaling:DescribeAutoScalingInstances",
                    "autoscaling:DescribeLaunchConfigurations",
                    "autoscaling:DescribeScalingActivities",
                    "autoscaling:DescribeTags",
                    "ec2:DescribeImages",
                    "ec2:DescribeInstanceTypes",
                    "ec2:DescribeLaunchTemplateVersions",
                    "ec2:GetInstanceTypesFromInstanceRequirements",
                ],
                resources=["*"],
            )
        )
        # Labels and taints of a managed node group come from EKS when it is at zero nodes.
        nodegroups = stack.format_arn(
            service="eks",
            resource="nodegroup",
            resource_name=f"{cluster.cluster_name}/*/*",
        )
        role.add_to_policy(
            iam.PolicyStatement(actions=["eks:DescribeNodegroup"], resources=[nodegroups])
        )
        # Scaling only on groups tagged as this cluster's (the node groups' discovery tag).
        role.add_to_policy(
            iam.PolicyStatement(
                actions=[
                    "autoscaling:SetDesiredCapacity",
                    "autoscaling:TerminateInstanceInAutoScalingGroup",
                ],
                resources=["*"],
                conditions={
                    "StringEquals": {
                        f"aws:ResourceTag/{CLUSTER_AUTOSCALER_TAG_PREFIX}/"
                        f"{cluster.cluster_name}": "owned"
                    }
                },
            )
        )
        acknowledge(
            role,
            "AwsSolutions-IAM5[Resource::*]",
            "Auto Scaling and EC2 describe actions support no resource-level permissions; "
            "SetDesiredCapacity and TerminateInstanceInAutoScalingGroup are limited by a "
            "condition on this cluster's autoscaler tag.",
        )
        acknowledge(
            role,
            wildcard_resource_finding(role, nodegroups),
            "DescribeNodegroup on this cluster's node groups only; their names carry a suffix "
            "chosen by CloudFormation.",
        )
        chart_version = versions.CLUSTER_AUTOSCALER_CHART
        chart = self._helm_chart(
            cluster,
            "ClusterAutoscaler",
            chart_version,
            release="cluster-autoscaler",
            namespace=SYSTEM_NAMESPACE,
            values={
                "cloudProvider": "aws",
                "awsRegion": stack.region,
                "fullnameOverride": "cluster-autoscaler",
                "autoDiscovery": {"clusterName": cluster.cluster_name},
                "image": {
                    "repository": versions.CLUSTER_AUTOSCALER_IMAGE,
                    "tag": cluster.release.cluster_autoscaler_image_tag,
                },
                "rbac": {
                    "serviceAccount": {"create": True, "name": CLUSTER_AUTOSCALER_SERVICE_ACCOUNT}
                },
                "nodeSelector": system.node_selector(),
                "tolerations": system.tolerations(),
                "extraArgs": {
                    # Node groups of one pool in several zones scale together.
                    "balance-similar-node-groups": True,
                    # Prefer the group that leaves the least idle CPU and memory.
                    "expander": "least-waste",
                    # Model servers and Ray pods use emptyDir caches; without this an idle
                    # accelerator node holding one would never be scaled down.
                    "skip-nodes-with-local-storage": False,
                },
            },
        )
        chart.node.add_dependency(identity.association)
        return role, chart
