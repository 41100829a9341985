"""The platform's API key: generated in AWS Secrets Manager, synced into the cluster.

Why the External Secrets Operator. The key has to reach the model servers as an environment
variable (vLLM reads ``VLLM_API_KEY``; the Serve applications are given its name), so it must
be a Kubernetes Secret. The operator keeps one real Secret in step with Secrets Manager, which
any pod can read with ``secretKeyRef``, and is the only component with AWS access to the key.
The Secrets Store CSI driver would need a CSI volume in every server pod (the Ray head and
workers included) and its Secret exists only while such a pod mounts it; a CloudFormation
custom resource cannot read the value into a manifest (dynamic references are not resolved in
custom resources), and would put the key into the kubectl handler's logs and the template.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from aws_cdk import Duration, Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_secretsmanager as secretsmanager

from eks_inference import versions
from eks_inference.charts.api_key import API_KEY_SECRET_NEED
from eks_inference.charts.ingress import api_key_chart
from eks_inference.constructs._nag import acknowledge
from eks_inference.constructs.addons.addon import AddonConstruct
from eks_inference.constructs.addons.helm import PinnedHelmChart, on_pool
from eks_inference.constructs.addons.registry import PlatformAddons, Provides
from eks_inference.specification.routes import api_key_secret_name

EXTERNAL_SECRETS_NAMESPACE = "external-secrets"
EXTERNAL_SECRETS_SERVICE_ACCOUNT = "external-secrets"


@dataclass(frozen=True)
class ApiKeysOptions:
    """How :class:`ApiKeys` makes the key and installs the operator."""

    key_length: int = 48
    """Default 48 letters and digits: about 285 bits, and no character a shell or a header
    needs escaped."""
    chart: versions.HelmChartVersion = versions.EXTERNAL_SECRETS_CHART
    """Default ``versions.EXTERNAL_SECRETS_CHART``: the operator release whose SecretStore
    and ExternalSecret API the key's chart renders."""
    ready_timeout: Duration = field(default_factory=lambda: Duration.minutes(10))
    """Default 10 minutes: Helm waits for the operator and its webhook, which validates
    SecretStores and ExternalSecrets, so the key's objects are applied once it answers."""


class ApiKeys(AddonConstruct[ApiKeysOptions]):
    """The platform's API key and the operator that puts it where the model servers read it.

    Creates:

    * a Secrets Manager secret ``<cluster>/api-key`` holding a generated 48-character key
      (:attr:`secret`); give it to application teams, or put a new value in it to rotate;
    * the External Secrets Operator (``versions.EXTERNAL_SECRETS_CHART``, with its CRDs) on the
      system pool, after the system node group and its Pod Identity association; its role may
      read (``GetSecretValue``, ``DescribeSecret``) this one secret and nothing else;
    * the platform's :func:`~eks_inference.charts.ingress.api_key_chart` (a SecretStore and
      an ExternalSecret in the inference namespace), which keeps the Secret
      ``names.API_KEY_SECRET`` in step with the secret, re-read hourly.

    It registers the synced Secret with the platform (:attr:`manifest` makes it), so model
    servers that require the key are applied after it: their pods would not start without
    the Secret. A rotated key reaches the Secret within the hour and
    the servers when their pods next start.
    """

    PROVIDES: ClassVar[Provides] = Provides(secrets=(API_KEY_SECRET_NEED,))

    OPTIONS = ApiKeysOptions

    def _install(self, platform: PlatformAddons, options: ApiKeysOptions) -> None:
        cluster = platform.cluster
        stack = Stack.of(self)
        system = cluster.system_pool
        self.secret = secretsmanager.Secret(
            self,
            "Secret",
            secret_name=api_key_secret_name(cluster.cluster_name),
            description=f"API key of the model endpoints of EKS cluster {cluster.cluster_name}",
            generate_secret_string=secretsmanager.SecretStringGenerator(
                password_length=options.key_length, exclude_punctuation=True
            ),
        )
        acknowledge(
            self.secret,
            "AwsSolutions-SMG4",
            "A static API key shared with client applications: rotating it automatically would "
            "break every client holding it. The platform team rotates it by putting a new "
            "value, which reaches the servers through the External Secrets Operator.",
        )
        identity = cluster.add_pod_identity(
            "ExternalSecrets",
            namespace=EXTERNAL_SECRETS_NAMESPACE,
            service_account=EXTERNAL_SECRETS_SERVICE_ACCOUNT,
            description=f"External Secrets Operator of EKS cluster {cluster.cluster_name}: "
            "reads the endpoints' API key",
            scope=self,
        )
        self.operator_role = identity.role
        self.operator_role.add_to_policy(
            iam.PolicyStatement(
                actions=["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"],
                resources=[self.secret.secret_arn],
            )
        )
        self.operator = PinnedHelmChart(
            self,
            "Operator",
            cluster=cluster,
            pinned=options.chart,
            release="external-secrets",
            namespace=EXTERNAL_SECRETS_NAMESPACE,
            create_namespace=True,
            wait=True,
            timeout=options.ready_timeout,
            values={
                "installCRDs": True,
                "serviceAccount": {"create": True, "name": EXTERNAL_SECRETS_SERVICE_ACCOUNT},
                "global": on_pool(system),
            },
        )
        self.operator.node.add_dependency(
            identity.association, self.operator_role, cluster.nodegroup(system.name)
        )
        # The literal name, as k8s_manifests/api-key.yaml has it.
        chart = api_key_chart(
            secret_id=api_key_secret_name(cluster.cluster_name), region=stack.region
        )
        self.manifest = eks.KubernetesManifest(
            self, "SyncedSecret", cluster=cluster.eks_cluster, manifest=chart.to_json()
        )
        # The operator installs the chart's custom resources and reads the key with its role.
        self.manifest.node.add_dependency(
            self.operator,
            self.operator_role,
            *(cluster.namespace(n) for n in chart.needs.namespaces),
        )
        for secret in self.PROVIDES.secrets:
            platform.add_secret_maker(secret, self.manifest)
