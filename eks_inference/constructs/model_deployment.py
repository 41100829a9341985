"""``ModelDeployment``: one model served on the cluster, with exactly the S3 access it needs.

The construct applies the charts of one :class:`~eks_inference.spec.ModelDeploymentSpec` (the
same charts :mod:`eks_inference.charts.render` writes to ``k8s_manifests/``) to an
:class:`~eks_inference.constructs.InferenceCluster` and gives the pods, and only them, read
access to their own prefixes of the :class:`~eks_inference.constructs.ModelBucket`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from typing import Any

import cdk8s
from aws_cdk import AssetHashType, AssetStaging, Stack, Token
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct, IConstruct

from eks_inference import names
from eks_inference.artifacts import artifact_prefix
from eks_inference.charts import (
    DeploymentChart,
    RenderContext,
    compile_job_charts,
    deployment_charts,
)
from eks_inference.charts.mountpoint import mountpoint_volumes
from eks_inference.constructs.cluster import InferenceCluster, PodIdentity
from eks_inference.constructs.model_bucket import ModelBucket
from eks_inference.platform import Placement
from eks_inference.serve.image import (
    NEURON_RAY_IMAGE_CONTEXT,
    neuron_ray_build_args,
    neuron_ray_image_hash,
)
from eks_inference.spec import ModelDeploymentSpec

# API group of the KubeRay custom resources; objects in it need the operator's CRDs first.
_KUBERAY_API_GROUP = "ray.io/"


class NeuronRayImage(Construct):
    """The Ray + Neuron vLLM image (``eks_inference/serve/image``), one per deployed stack.

    Registered with the stack's synthesizer under the source hash
    :func:`~eks_inference.serve.image.neuron_ray_image_hash`, which is also the image tag, so
    the URI CloudFormation resolves is the one :func:`~eks_inference.serve.image.asset_image_uri`
    writes into ``k8s_manifests/``. Synth copies the build context (a Dockerfile) into the
    cloud assembly, so ``cdk.out`` deploys on its own; the CDK CLI builds and pushes the image
    at deploy time. Use :meth:`of`: every Neuron RayService of a stack, including those in its
    nested stacks, shares the one image, which is built once.
    """

    _ID = "NeuronRayImage"

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        source_hash = neuron_ray_image_hash()
        # Staged like DockerImageAsset stages its context, but under our own hash: the
        # manifests must know the tag without synthesizing, which DockerImageAsset's
        # fingerprint does not allow.
        staging = AssetStaging(
            self,
            "Context",
            source_path=str(NEURON_RAY_IMAGE_CONTEXT),
            asset_hash=source_hash,
            asset_hash_type=AssetHashType.CUSTOM,
        )
        location = stack.synthesizer.add_docker_image_asset(
            source_hash=source_hash,
            directory_name=staging.relative_staged_path(stack),
            docker_build_args=neuron_ray_build_args(),
        )
        self.image_uri: str = location.image_uri

    @classmethod
    def of(cls, scope: IConstruct) -> NeuronRayImage:
        """The image of the deployed (outermost) stack around ``scope``, created on first use."""
        stack = Stack.of(scope)
        while stack.nested_stack_parent is not None:
            stack = stack.nested_stack_parent
        existing = stack.node.try_find_child(cls._ID)
        if existing is None:
            return cls(stack, cls._ID)
        if not isinstance(existing, cls):
            raise TypeError(f"{stack.node.path}/{cls._ID} exists and is not a {cls.__name__}")
        return existing


class ModelDeployment(Construct):
    """One model server on an :class:`InferenceCluster`: its charts, applied, and its IAM.

    Creates:

    * one ``Custom::AWSCDK-EKS-KubernetesResource`` per chart of
      :func:`~eks_inference.charts.deployment_charts` (Mountpoint volumes, then the vLLM
      Deployment or the RayService) and, with ``neuron.run_compile_job``, of
      :func:`~eks_inference.charts.compile_job_charts` (the Neuron compile Job), in that
      order (:attr:`charts`, :attr:`manifests`), each after what it needs: the
      ``inference`` namespace; the Mountpoint add-on and its role's policy for charts with
      PersistentVolumes; the KubeRay operator (its CRDs) for the RayService; the Pod Identity
      association (and the role's policy) of every service account in the chart, since the
      Pod Identity webhook gives credentials only to pods created after the association;
    * for ``loader: runai_streamer`` (vLLM reads ``s3://`` itself): an IAM role for the
      service account ``names.service_account_name(spec.name)`` in ``names.INFERENCE_NAMESPACE``,
      given through Pod Identity, that can list and read the weights prefix and nothing else;
    * for Mountpoint volumes: read access for the cluster's Mountpoint driver to exactly the
      prefixes the charts mount (the weights prefix, and on Inferentia2 the
      compiled-artifacts prefix), taken from the rendered volumes so IAM and PVs cannot
      disagree. The driver's role lives with the cluster's add-ons; the serving pods get no
      AWS credentials at all;
    * on Inferentia2 with a compiled-artifacts prefix: an IAM role for the compile job's
      service account ``names.compile_service_account_name(spec.name)`` that can upload to
      this deployment's artifact key (:func:`~eks_inference.artifacts.artifact_prefix`) and
      do nothing else. It is the only principal of the deployment that can write there, so
      serving never modifies the artifacts it loads. It exists whether or not the Job is
      applied here, since ``k8s_manifests/`` holds the Job for running by hand. Deployments
      that compile the same graph share a key, and each one's compile role can write it;
    * for a Neuron RayService: the Ray + Neuron image (:class:`NeuronRayImage`, once per stack).

    Charts are rendered under a fresh :class:`cdk8s.App` (cdk8s charts must never be created
    under a CDK scope) with the bucket's name and a literal ``region``: the Mountpoint mount
    options and the Run:ai streamer's environment take it verbatim. ``region`` defaults to the
    stack's region, which must then be concrete.

    The manifests are created in this construct's scope, not under the cluster as
    ``cluster.add_cdk8s_chart`` would do (which is otherwise what this is:
    ``KubernetesManifest(manifest=chart.to_json())``), so that a deployment placed in a
    ``NestedStack`` keeps its manifests, roles and associations in that nested stack. CDK turns
    the references to the cluster, its kubectl provider and the bucket into nested-stack
    parameters and every dependency on a resource of the parent (kubectl readiness, namespace,
    add-ons, Pod Identity agent) into a ``DependsOn`` of the nested stack's resource. The one
    grant that lands in the parent is the Mountpoint driver's, whose role is shared.

    Attributes: :attr:`charts` and :attr:`manifests` (same order), :attr:`server_identity`
    (Run:ai streamer deployments), :attr:`compile_identity` (Neuron deployments with compiled
    artifacts), :attr:`mountpoint_prefixes` (granted to the Mountpoint driver),
    :attr:`neuron_ray_image` (Neuron RayService deployments) and :attr:`region`.
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
        region: str | None = None,
    ) -> None:
        """Render, apply and authorize ``spec``.

        :param cluster: the cluster, with its add-ons installed (``add_addons``).
        :param bucket: the model bucket holding the weights and compiled artifacts.
        :param spec: the deployment.
        :param placement: the node pools of its workers and (Ray) head; they must be pools of
            ``cluster``, e.g. ``platform.placement(spec)``.
        :param region: the bucket's region, written into the pods' configuration; default:
            the stack's region, which must then be known at synth time.
        """
        super().__init__(scope, construct_id)
        for pool in (placement.workers, placement.head):
            if cluster.node_pool(pool.name) != pool:
                raise ValueError(
                    f"deployment {spec.name!r} is placed on pool {pool.name!r}, which differs "
                    "from the cluster's pool of that name; use the platform's placement"
                )
        self.spec = spec
        self.placement = placement
        self.region = _literal_region(self, region)
        self.neuron_ray_image: str | None = (
            NeuronRayImage.of(self).image_uri
            if spec.on_neuron and spec.engine == "rayservice"
            else None
        )
        context = RenderContext(
            bucket_name=bucket.bucket_name,
            region=self.region,
            # Only Neuron RayService pods run the built image; the charts read this field for
            # nothing else, so other deployments leave it empty rather than register an image
            # that nothing would pull.
            neuron_ray_image=self.neuron_ray_image or "",
        )
        charts = cdk8s.App()
        self.charts: list[cdk8s.Chart] = deployment_charts(charts, spec, placement, context)
        if spec.neuron_options.run_compile_job:
            # After the volumes it mounts; serving pods wait for its completion marker.
            self.charts += compile_job_charts(charts, spec, placement, context)

        self.server_identity: PodIdentity | None = None
        if spec.weights.loader == "runai_streamer":
            self.server_identity = cluster.add_pod_identity(
                "Server",
                namespace=names.INFERENCE_NAMESPACE,
                service_account=names.service_account_name(spec.name),
                description=(
                    f"Model servers of {spec.name} on EKS cluster {cluster.cluster_name}: "
                    f"stream the weights under {spec.weights.prefix}"
                ),
                scope=self,
            )
            bucket.grant_read_prefix(self.server_identity.role, spec.weights.prefix)

        self.compile_identity: PodIdentity | None = None
        if spec.on_neuron and spec.neuron_options.compiled_artifacts_prefix is not None:
            key = artifact_prefix(spec)
            self.compile_identity = cluster.add_pod_identity(
                "Compile",
                namespace=names.INFERENCE_NAMESPACE,
                service_account=names.compile_service_account_name(spec.name),
                description=(
                    f"Neuron compile job of {spec.name} on EKS cluster {cluster.cluster_name}: "
                    f"the only writer of {key}"
                ),
                scope=self,
            )
            bucket.grant_write_prefix(self.compile_identity.role, key)

        identities = {
            names.service_account_name(spec.name): self.server_identity,
            names.compile_service_account_name(spec.name): self.compile_identity,
        }
        addons = cluster.addons
        self.mountpoint_prefixes: tuple[str, ...] = ()
        self.manifests: list[eks.KubernetesManifest] = []
        for chart in self.charts:
            objects: list[Mapping[str, Any]] = chart.to_json()
            role = chart.role if isinstance(chart, DeploymentChart) else chart.node.id
            manifest = eks.KubernetesManifest(
                self, role, cluster=cluster.eks_cluster, manifest=objects
            )
            # Everything the manifest waits for, added in one call.
            dependencies: list[IConstruct] = [cluster.inference_namespace]
            if self.manifests:
                # Apply order is list order: a server mounts the claims applied before it.
                dependencies.append(self.manifests[-1])
            prefixes = _mounted_prefixes(chart)
            if prefixes:
                for prefix in prefixes:
                    addons.grant_mountpoint_read(prefix)
                self.mountpoint_prefixes += prefixes
                # The driver must exist, and be able to read, before a volume is mounted.
                dependencies += [addons.mountpoint_addon, addons.mountpoint_role]
            if any(o["apiVersion"].startswith(_KUBERAY_API_GROUP) for o in objects):
                dependencies.append(addons.kuberay_operator_chart)
            for account in _service_accounts(objects):
                identity = identities.get(account)
                if identity is not None:
                    dependencies += [identity.association, identity.role]
            manifest.node.add_dependency(*dependencies)
            self.manifests.append(manifest)


def _literal_region(scope: Construct, region: str | None) -> str:
    """``region``, or the stack's; a literal string that agrees with a concrete stack region."""
    stack_region = Stack.of(scope).region
    known = not _is_unresolved(stack_region)
    if region is None:
        if not known:
            raise ValueError(
                "ModelDeployment needs a literal region (Mountpoint mount options and the "
                "Run:ai streamer take it verbatim): pass region=, or give the stack an env"
            )
        return stack_region
    if _is_unresolved(region):
        raise ValueError("region must be a literal string such as 'us-east-1', not a token")
    if known and region != stack_region:
        raise ValueError(
            f"region {region!r} differs from the stack's region {stack_region!r}, where the "
            "model bucket is"
        )
    return region


@cache
def _is_unresolved(value: str) -> bool:
    """``Token.is_unresolved`` of a string, which depends on nothing but its text."""
    return Token.is_unresolved(value)


def _mounted_prefixes(chart: cdk8s.Chart) -> tuple[str, ...]:
    """Bucket prefixes the Mountpoint volumes of ``chart`` mount, all of them read-only."""
    volumes = mountpoint_volumes(chart)
    writable = [v.prefix for v in volumes if not v.read_only]
    if writable:
        raise ValueError(
            f"chart {chart.node.id} mounts {writable} read-write; the Mountpoint driver is "
            "only ever given read access, so writers upload with their own identity"
        )
    return tuple(v.prefix for v in volumes)


def _service_accounts(objects: Iterable[Mapping[str, Any]]) -> Sequence[str]:
    """Names of the ServiceAccounts among ``objects``."""
    return [o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount"]
