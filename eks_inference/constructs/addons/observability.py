"""The metrics stack: Prometheus and Grafana, GPU and NeuronCore exporters, and KEDA.

Why in-cluster kube-prometheus-stack rather than Amazon Managed Service for Prometheus: the
stack needs no AWS workspace, no collector identity and no SigV4 proxy for Grafana or KEDA
(both query Prometheus over the cluster network), synthesizes without credentials, and is
what vLLM production-stack, KubeRay and ai-on-eks ship their monitors and dashboards for.
The price is that its time series live in the cluster, bounded (see below) and on one
volume; remote-writing them to AMP later is a change to the Prometheus values, not to the
monitors, rules or dashboards.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam

from eks_inference import names, versions
from eks_inference.catalog import Accelerator
from eks_inference.charts.autoscaling import SCALEDOBJECT_CRD
from eks_inference.charts.metadata import PART_OF, api_object, metadata
from eks_inference.charts.monitoring import (
    PODMONITOR_CRD,
    PROMETHEUSRULE_CRD,
    exporters_chart,
    neuron_pools,
)
from eks_inference.constructs._nag import acknowledge, managed_policy_finding
from eks_inference.constructs.addons.addon import AddonConstruct
from eks_inference.constructs.addons.helm import (
    PinnedHelmChart,
    on_pool,
    pool_affinity,
    pool_tolerations,
    pools_with,
)
from eks_inference.constructs.addons.registry import PlatformAddons, Provides
from eks_inference.constructs.cluster import InferenceCluster
from eks_inference.constructs.eks_addon import AddonRole, EksAddon
from eks_inference.observability.signals import KSM_POD_LABELS, SCRAPE_INTERVAL_SECONDS, seconds
from eks_inference.specification.node_pools import NodePool

# The Prometheus Operator CRDs kube-prometheus-stack installs (its `crds` subchart).
PROMETHEUS_OPERATOR_CRDS = (
    PODMONITOR_CRD,
    PROMETHEUSRULE_CRD,
    "servicemonitors.monitoring.coreos.com",
    "probes.monitoring.coreos.com",
    "scrapeconfigs.monitoring.coreos.com",
    "prometheuses.monitoring.coreos.com",
    "prometheusagents.monitoring.coreos.com",
    "alertmanagers.monitoring.coreos.com",
    "alertmanagerconfigs.monitoring.coreos.com",
    "thanosrulers.monitoring.coreos.com",
)
KEDA_CRDS = (
    SCALEDOBJECT_CRD,
    "scaledjobs.keda.sh",
    "triggerauthentications.keda.sh",
    "clustertriggerauthentications.keda.sh",
)
STORAGE_CLASS = "gp3-encrypted"
# Where Grafana's sidecar looks for dashboards: the deployments' namespace and its own.
GRAFANA_NAMESPACES = (names.INFERENCE_NAMESPACE, names.MONITORING_NAMESPACE)
_PROMETHEUS_RESOURCES = {"cpu": "1", "memory": "4Gi"}
_EBS_CSI_SERVICE_ACCOUNT = "ebs-csi-controller-sa"
_EBS_CSI_POLICY = "service-role/AmazonEBSCSIDriverPolicy"
# Components of the managed control plane whose metrics EKS does not expose to scrapers,
# and kube-proxy, which binds its metrics to localhost: targets that would only be down.
_UNREACHABLE_TARGETS = ("kubeControllerManager", "kubeScheduler", "kubeEtcd", "kubeProxy")
_HELM_TIMEOUT = Duration.minutes(15)


@dataclass(frozen=True)
class ObservabilityOptions:
    """How long and how much :class:`InferenceObservability` keeps.

    Time series are bounded twice, by age and by size, so Prometheus deletes old blocks
    before its volume fills: the defaults keep 15 days and never more than 40 GB on a 50 GiB
    gp3 volume, the remainder being head block and write-ahead log headroom. Raise all three
    together.
    """

    retention: str = "15d"
    """Default ``15d``: long enough to compare a model's load against the last two weeks."""
    retention_size: str = "40GB"
    """Default ``40GB``: 80% of :attr:`prometheus_volume`, leaving room for the head block
    and the write-ahead log."""
    prometheus_volume: str = "50Gi"
    """Default ``50Gi``: the encrypted gp3 volume of Prometheus' time series."""
    keep_prometheus_volume: bool = False
    """Default ``False``: Prometheus' claim, and with it its EBS volume, is deleted with the
    release (``cdk destroy`` leaves no volume to pay for). ``True`` keeps the claim when the
    Prometheus StatefulSet is deleted and leaves the monitoring namespace to the cluster's own
    deletion, so the volume and its time series outlive the stack; find it afterwards with
    ``eks-inference leftovers`` and delete it yourself."""

    @property
    def prometheus_claim_retention(self) -> dict[str, str]:
        """The Prometheus StatefulSet's ``persistentVolumeClaimRetentionPolicy``: its claim
        deleted with it unless :attr:`keep_prometheus_volume`; kept on a scale-down, so that
        scaling back up finds its time series."""
        return {
            "whenDeleted": "Retain" if self.keep_prometheus_volume else "Delete",
            "whenScaled": "Retain",
        }


class InferenceObservability(AddonConstruct[ObservabilityOptions]):
    """Metrics, dashboards, alerts and the autoscaler of standalone vLLM, as cluster add-ons.

    * **Amazon EBS CSI driver** (EKS add-on, Pod Identity role with AWS's driver policy) and
      an encrypted gp3 StorageClass (:data:`STORAGE_CLASS`), for Prometheus' volume.
    * **kube-prometheus-stack** (``versions.KUBE_PROMETHEUS_STACK_CHART``) in
      ``names.MONITORING_NAMESPACE``, everything on the system pool: the Prometheus Operator
      and its CRDs; Prometheus selecting PodMonitors, ServiceMonitors and rules in every
      namespace, keeping what :class:`ObservabilityOptions` bounds (15 days, at most 40 GB
      on a 50 GiB volume, by default); Alertmanager; Grafana, whose sidecar loads the
      deployments' dashboard ConfigMaps from :data:`GRAFANA_NAMESPACES` only (with Roles in
      those namespaces, no ClusterRole) and whose admin password is
      generated (never the chart's published default); kube-state-metrics exporting the
      pods' instance and component labels, which the dashboards and alerts join on.
    * **DCGM exporter** (``versions.DCGM_EXPORTER_CHART``, GPU pools only) on the GPU pools
      alone (their labels and taints), with Kubernetes mapping so each GPU series names the
      pod and namespace using it, kept on scrape (``honorLabels``).
    * **neuron-monitor** with its Prometheus exporter (Neuron pools only): the DaemonSets and
      PodMonitor of :func:`~eks_inference.charts.monitoring.exporters_chart`.
    * **KEDA** (``versions.KEDA_CHART``) in ``names.KEDA_NAMESPACE`` on the system pool,
      with its operator and metrics server scraped.

    It registers with ``platform`` as its metrics stack, with kube-prometheus-stack as the
    installer of the Prometheus Operator CRDs and KEDA as that of its own, so a deployment's
    monitors, rules and ScaledObjects are applied after the release that installs their CRD.
    Exporters, KEDA and the neuron-monitor objects wait for kube-prometheus-stack, whose
    ServiceMonitor and PodMonitor CRDs they use.

    **Teardown.** Prometheus' volume is the one AWS resource the stack makes through a
    controller here: the StatefulSet's claim, provisioned by the EBS CSI driver. The claim is
    deleted with the StatefulSet (``persistentVolumeClaimRetentionPolicy``, see
    :attr:`ObservabilityOptions.keep_prometheus_volume`), and the ``monitoring`` namespace
    (:attr:`namespace`, created here rather than by Helm, which never deletes a namespace) is
    deleted after the release, waiting for everything in it to go, the claim included: only
    then are the EBS CSI driver, its StorageClass and the system node group it runs on
    deleted, so the driver is still there to delete the volume.
    """

    PROVIDES: ClassVar[Provides] = Provides(crds=(*PROMETHEUS_OPERATOR_CRDS, *KEDA_CRDS))

    OPTIONS = ObservabilityOptions

    def _install(self, platform: PlatformAddons, options: ObservabilityOptions) -> None:
        cluster = platform.cluster
        system = cluster.system_pool
        self.ebs_csi_role, self.ebs_csi_addon = self._add_ebs_csi(cluster)
        storage_class = eks.KubernetesManifest(
            self,
            "StorageClass",
            cluster=cluster.eks_cluster,
            manifest=[_storage_class()],
        )
        self.namespace = self._add_namespace(cluster)
        # Deleted after the release and before the driver and the nodes it runs on, waiting
        # for the claim (the pod gone, its volume unmounted), so the driver deletes the volume.
        self.namespace.node.add_dependency(
            storage_class, self.ebs_csi_addon, cluster.nodegroup(system.name)
        )
        self.kube_prometheus_stack = self._add_kube_prometheus_stack(cluster, system)
        # Grafana's Roles are created in the inference namespace, so it must exist first.
        self.kube_prometheus_stack.node.add_dependency(
            storage_class,
            self.ebs_csi_addon,
            self.namespace,
            cluster.namespace(names.INFERENCE_NAMESPACE),
        )
        self.dcgm_exporter = self._add_dcgm_exporter(cluster)
        self.neuron_monitor = self._add_neuron_monitor(cluster)
        self.keda = self._add_keda(cluster, system)
        for follower in (self.dcgm_exporter, self.neuron_monitor, self.keda):
            if follower is not None:
                follower.node.add_dependency(self.kube_prometheus_stack)
        platform.set_metrics(self)
        platform.add_namespace_maker(names.MONITORING_NAMESPACE, self.namespace)
        platform.add_crd_installer(PROMETHEUS_OPERATOR_CRDS, self.kube_prometheus_stack)
        platform.add_crd_installer(KEDA_CRDS, self.keda)

    def _add_ebs_csi(self, cluster: InferenceCluster) -> tuple[iam.Role, eks.Addon]:
        addon = EksAddon(
            self,
            "EbsCsi",
            cluster=cluster,
            addon_name="aws-ebs-csi-driver",
            addon_version=versions.EBS_CSI_ADDON_VERSION,
            role=AddonRole(
                "EbsCsiRole",
                _EBS_CSI_SERVICE_ACCOUNT,
                description=(
                    f"Amazon EBS CSI driver of EKS cluster {cluster.cluster_name}: creates and "
                    "attaches the metrics volumes"
                ),
                managed_policy=_EBS_CSI_POLICY,
            ),
        )
        acknowledge(
            addon.role,
            managed_policy_finding(_EBS_CSI_POLICY),
            "AWS's policy for the EBS CSI driver, maintained with the driver; its create and "
            "delete actions are conditioned on the volume tags the driver sets.",
        )
        return addon.role, addon

    def _add_namespace(self, cluster: InferenceCluster) -> eks.KubernetesManifest:
        """The ``monitoring`` namespace; with :attr:`ObservabilityOptions.keep_prometheus_volume`
        it is left to the cluster's deletion, with the claim in it."""
        labels = {"app.kubernetes.io/part-of": PART_OF, "app.kubernetes.io/managed-by": PART_OF}
        namespace = api_object(
            "v1", "Namespace", metadata(names.MONITORING_NAMESPACE, labels, namespace=None), {}
        )
        return eks.KubernetesManifest(
            self,
            "Namespace",
            cluster=cluster.eks_cluster,
            manifest=[namespace],
            # Applied, not created: on a cluster deployed before this manifest existed, Helm
            # created the namespace, and apply takes it over.
            overwrite=True,
            removal_policy=RemovalPolicy.RETAIN if self.options.keep_prometheus_volume else None,
        )

    def _add_kube_prometheus_stack(
        self, cluster: InferenceCluster, system: NodePool
    ) -> eks.HelmChart:
        on_system = on_pool(system)
        values: dict[str, Any] = {
            "fullnameOverride": names.KUBE_PROMETHEUS_STACK_NAME,
            "prometheusOperator": {
                **on_system,
                "admissionWebhooks": {"patch": on_system},
            },
            "prometheus": {
                "prometheusSpec": {
                    **on_system,
                    "scrapeInterval": seconds(SCRAPE_INTERVAL_SECONDS),
                    "retention": self.options.retention,
                    "retentionSize": self.options.retention_size,
                    "resources": {
                        "requests": dict(_PROMETHEUS_RESOURCES),
                        "limits": {"memory": _PROMETHEUS_RESOURCES["memory"]},
                    },
                    # Monitors and rules from every namespace, without a release label.
                    "podMonitorSelectorNilUsesHelmValues": False,
                    "serviceMonitorSelectorNilUsesHelmValues": False,
                    "ruleSelectorNilUsesHelmValues": False,
                    "persistentVolumeClaimRetentionPolicy": (
                        self.options.prometheus_claim_retention
                    ),
                    "storageSpec": {
                        "volumeClaimTemplate": {
                            "spec": {
                                "storageClassName": STORAGE_CLASS,
                                "accessModes": ["ReadWriteOnce"],
                                "resources": {
                                    "requests": {"storage": self.options.prometheus_volume}
                                },
                            }
                        }
                    },
                }
            },
            "alertmanager": {"alertmanagerSpec": on_system},
            "grafana": {
                **on_system,
                # Empty: the Grafana chart generates one into its Secret.
                "adminPassword": "",
                # Dashboards only from the namespaces the platform owns: the deployments'
                # (inference) and the chart's own. The sidecar reads ConfigMaps and Secrets,
                # so its Roles are in those namespaces too, instead of a ClusterRole that
                # would let Grafana read every Secret of the cluster.
                "sidecar": {
                    "dashboards": {
                        "enabled": True,
                        "label": names.GRAFANA_DASHBOARD_LABEL,
                        "labelValue": "1",
                        "searchNamespace": list(GRAFANA_NAMESPACES),
                    }
                },
                # The chart adds its own namespace to these.
                "rbac": {"namespaced": True, "namespaces": [names.INFERENCE_NAMESPACE]},
            },
            "kube-state-metrics": {
                **on_system,
                "metricLabelsAllowlist": [f"pods=[{','.join(KSM_POD_LABELS)}]"],
            },
            **{target: {"enabled": False} for target in _UNREACHABLE_TARGETS},
        }
        return PinnedHelmChart(
            self,
            "KubePrometheusStack",
            cluster=cluster,
            pinned=versions.KUBE_PROMETHEUS_STACK_CHART,
            release=names.KUBE_PROMETHEUS_STACK_NAME,
            namespace=names.MONITORING_NAMESPACE,
            # The namespace is the add-on's own manifest, which outlives the release.
            create_namespace=False,
            skip_crds=False,
            timeout=_HELM_TIMEOUT,
            values=values,
        )

    def _add_dcgm_exporter(self, cluster: InferenceCluster) -> eks.HelmChart | None:
        pools = pools_with(cluster.node_pools, Accelerator.NVIDIA)
        if not pools:
            return None
        return PinnedHelmChart(
            self,
            "DcgmExporter",
            cluster=cluster,
            pinned=versions.DCGM_EXPORTER_CHART,
            release="dcgm-exporter",
            namespace=names.MONITORING_NAMESPACE,
            values={
                "image": {"tag": versions.DCGM_EXPORTER_IMAGE_TAG},
                "affinity": pool_affinity(pools),
                "tolerations": pool_tolerations(pools),
                "serviceMonitor": {
                    "enabled": True,
                    "interval": seconds(SCRAPE_INTERVAL_SECONDS),
                    # Keep the exporter's pod and namespace labels (the GPU's user), rather
                    # than renaming them exported_pod beside the exporter's own.
                    "honorLabels": True,
                },
            },
        )

    def _add_neuron_monitor(self, cluster: InferenceCluster) -> eks.KubernetesManifest | None:
        pools: Sequence[NodePool] = neuron_pools(cluster.node_pools)
        if not pools:
            return None
        chart = exporters_chart(pools)
        return eks.KubernetesManifest(
            self, "NeuronMonitor", cluster=cluster.eks_cluster, manifest=chart.to_json()
        )

    def _add_keda(self, cluster: InferenceCluster, system: NodePool) -> eks.HelmChart:
        on_system = on_pool(system)
        scraped = {"enabled": True, "serviceMonitor": {"enabled": True}}
        return PinnedHelmChart(
            self,
            "Keda",
            cluster=cluster,
            pinned=versions.KEDA_CHART,
            release="keda",
            namespace=names.KEDA_NAMESPACE,
            create_namespace=True,
            skip_crds=False,
            values={
                **on_system,
                "prometheus": {"operator": scraped, "metricServer": scraped},
            },
        )


def _storage_class() -> dict[str, Any]:
    """gp3, encrypted, bound where the pod is scheduled, expandable; deleted with its claim."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": STORAGE_CLASS},
        "provisioner": "ebs.csi.aws.com",
        "parameters": {"type": "gp3", "encrypted": "true"},
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "WaitForFirstConsumer",
        "allowVolumeExpansion": True,
    }
