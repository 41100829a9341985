"""Every pinned version the library emits: images, Helm charts, EKS add-ons, Kubernetes.

One module so that an upgrade is one reviewed diff, and so that tests can assert that nothing
rendered anywhere is tagged ``latest``. Versions marked *unverified* come from public release
notes and are overridable defaults rather than facts checked against a registry from here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HelmChartVersion:
    """A Helm chart pinned to one version, from an HTTP or OCI repository."""

    chart: str
    repository: str
    version: str


# Kubernetes in EKS standard support; the kubectl Lambda layer must match (kubectl-v35).
KUBERNETES_VERSION = "1.35"

# Ray: the operator's `rayVersion`, the Ray LLM image on GPUs, and the Ray baked into our
# Neuron Ray image all agree, so head and workers speak the same protocol.
RAY_VERSION = "2.60.0"

KUBERAY_OPERATOR_CHART = HelmChartVersion(
    chart="kuberay-operator",
    repository="https://ray-project.github.io/kuberay-helm/",
    version="1.7.0",
)
NEURON_HELM_CHART = HelmChartVersion(
    chart="neuron-helm-chart",
    repository="oci://public.ecr.aws/neuron/neuron-helm-chart",
    version="1.9.0",
)
NVIDIA_DEVICE_PLUGIN_CHART = HelmChartVersion(
    chart="nvidia-device-plugin",
    repository="https://nvidia.github.io/k8s-device-plugin",
    version="0.20.0",
)

# Images. The GPU and Neuron stacks are pinned separately: Inferentia2 is served by a legacy
# Neuron stack (vLLM 0.16 + vllm-neuron, NxD Inference) whose images trail the GPU ones.
# The GPU vLLM of the engines that run `vllm serve` (standalone vLLM, KServe's predictor):
# 0.34.0, the newest release on PyPI, for multi-node serving (`--nnodes`, `--node-rank`,
# `--master-addr`, `--headless` with the multiprocessing backend) and current model support.
# The Ray LLM image keeps the vLLM that `ray[llm]==2.60.0` pins (0.29.0): RayService
# deployments parse their engine arguments with that release, and the engine arguments the
# charts render are the same on both (none of them changed between the two). Its default
# build is CUDA 13 (torch 2.14), which the AL2023 NVIDIA AMI's 580 driver runs.
# What changed from 0.29.0 for the flags the project renders (tests/upstream/
# vllm-v0.34.0-serve-options.txt, from 0.34.0's own parser): nothing for --served-model-name,
# --tensor-parallel-size, --pipeline-parallel-size, --max-model-len, --max-num-seqs, --dtype,
# --block-size, --gpu-memory-utilization, --load-format, --model-loader-extra-config,
# --kv-transfer-config, --attention-backend, --middleware, --host and --port. Booleans are
# now --enable-x/--disable-x pairs (EnableDisableAction): --no-enable-prefix-caching, which
# only the Neuron server (vLLM 0.16) is given, is still accepted but hidden from help, beside
# the new --disable-prefix-caching; --disable-log-requests, removed in 0.12, is back as the
# negation of --enable-log-requests (the default), and stays unrendered because vLLM 0.16
# refuses it. --log-config-file is gone (never rendered). The authenticating middleware still
# guards /v1, /v2, /inference and /cohere only, and --middleware classes are still added with
# the app alone (vllm/entrypoints/serve/middleware/register.py).
GPU_VLLM_VERSION = "0.34.0"
# The image carries no libfabric and no aws-ofi-nccl (vllm-project/vllm issue 55635, open):
# NCCL in it would use its socket transport across nodes, so groups on EFA nodes run the image
# below instead.
VLLM_GPU_IMAGE = f"vllm/vllm-openai:v{GPU_VLLM_VERSION}"
# The server of a multi-node group on nodes with EFA attached: the AWS Deep Learning
# Containers vLLM image for EC2, which is vllm/vllm-openai at the same vLLM with the EFA
# installer's libfabric and aws-ofi-nccl added (aws/deep-learning-containers
# docker/vllm/Dockerfile, target vllm-ec2; the release's tags in
# docs/src/data/vllm/0.31.0-gpu-ec2.yml), on the public registry. 0.31.0 is the newest vLLM
# that image line publishes, three minors behind GPU_VLLM_VERSION: a group's argument lists are
# checked against 0.31.0's own parser (tests/upstream/vllm-v0.31.0-serve-options.txt). It runs
# as root, like the image it extends; the pod's command replaces its entrypoint (a telemetry
# call and `vllm serve`). The Run:ai streamer is what vllm/vllm-openai:v0.31.0 installs (its
# wheel's `runai` extra requires runai-model-streamer[s3] >= 0.15.7, which the vLLM image
# build installs, unverified here against that tag's Dockerfile, which could not be fetched).
EFA_VLLM_VERSION = "0.31.0"
VLLM_EFA_IMAGE = (
    "public.ecr.aws/deep-learning-containers/vllm:"
    f"{EFA_VLLM_VERSION}-gpu-py312-cu130-ubuntu24.04-ec2"
)
RAY_LLM_GPU_IMAGE = f"rayproject/ray-llm:{RAY_VERSION}-py311-cu128"
NEURON_VLLM_IMAGE = (
    "public.ecr.aws/neuron/pytorch-inference-vllm-neuronx:"
    "0.16.0-neuronx-py312-sdk2.31.1-ubuntu24.04"
)
NEURON_SDK_VERSION = "2.31.1"
# LMCache (kv_cache: KV tiers in host memory and on local NVMe): 0.5.6, whose vLLM
# integration (lmcache.integration.vllm.vllm_v1_adapter) is the one vLLM 0.29.0's
# LMCacheConnectorV1 imports (and 0.34.0's factory still registers). The standalone vLLM
# image does not ship LMCache, so a deployment with kv_cache runs the LMCache project's image
# of the same release, vLLM's OpenAI server with LMCache installed (unverified against Docker
# Hub from here: which vLLM it builds on is LMCache's choice, to be checked when either pin
# moves); its arguments are checked against the pinned 0.34.0 parser like every other's.
LMCACHE_VERSION = "0.5.6"
LMCACHE_VLLM_IMAGE = f"lmcache/vllm-openai:v{LMCACHE_VERSION}"
# Ray head image when the workers run the GPU Ray LLM image: the same image, so the head can
# import the Serve application (`ray.serve.llm`) it routes to.
RAY_HEAD_GPU_IMAGE = RAY_LLM_GPU_IMAGE


@dataclass(frozen=True)
class KubernetesRelease:
    """Components whose version must follow the cluster's Kubernetes minor version.

    The kubectl Lambda layer runs ``kubectl``/``helm`` against the API server (kubectl supports
    one minor version of skew); the Cluster Autoscaler embeds the scheduler of its own minor
    version and is only tested against the matching control plane; the Neuron chart's second
    scheduler is a stock kube-scheduler, which must not be newer than the API server.
    """

    kubectl_layer_module: str
    kubectl_layer_class: str
    cluster_autoscaler_image_tag: str
    kube_scheduler_image_tag: str


# Kubernetes minor versions the library can build a cluster for, each with its matching
# kubectl layer (PyPI `aws-cdk.lambda-layer-kubectl-v3X`, pinned in requirements.txt).
# Cluster Autoscaler tags: the 2026-07-23 patch releases of each minor line.
# kube-scheduler tags: EKS Distro releases (public.ecr.aws/eks-distro); the 1.35 tag is the
# one the Neuron samples run, the 1.33 and 1.34 tags are the EKS-D release tags whose
# kube-apiserver images are published under the same tag (unverified for kube-scheduler).
KUBERNETES_RELEASES: dict[str, KubernetesRelease] = {
    "1.33": KubernetesRelease(
        kubectl_layer_module="aws_cdk.lambda_layer_kubectl_v33",
        kubectl_layer_class="KubectlV33Layer",
        cluster_autoscaler_image_tag="v1.33.6",
        kube_scheduler_image_tag="v1.33.7-eks-1-33-20",
    ),
    "1.34": KubernetesRelease(
        kubectl_layer_module="aws_cdk.lambda_layer_kubectl_v34",
        kubectl_layer_class="KubectlV34Layer",
        cluster_autoscaler_image_tag="v1.34.5",
        kube_scheduler_image_tag="v1.34.3-eks-1-34-15",
    ),
    "1.35": KubernetesRelease(
        kubectl_layer_module="aws_cdk.lambda_layer_kubectl_v35",
        kubectl_layer_class="KubectlV35Layer",
        cluster_autoscaler_image_tag="v1.35.2",
        kube_scheduler_image_tag="v1.35.2-eks-1-35-8",
    ),
}

# Cluster Autoscaler: chart 9.59.0 is the newest chart seen (its default image is v1.35.0);
# the image tag is always set from KUBERNETES_RELEASES so it follows the cluster version.
CLUSTER_AUTOSCALER_CHART = HelmChartVersion(
    chart="cluster-autoscaler",
    repository="https://kubernetes.github.io/autoscaler",
    version="9.59.0",
)
CLUSTER_AUTOSCALER_IMAGE = "registry.k8s.io/autoscaling/cluster-autoscaler"
# The Neuron chart's second scheduler (a stock kube-scheduler with the Neuron extender).
KUBE_SCHEDULER_IMAGE = "public.ecr.aws/eks-distro/kubernetes/kube-scheduler"
# The KubeRay chart's own default tag on its main branch is `nightly`; set the release tag.
KUBERAY_OPERATOR_IMAGE_TAG = f"v{KUBERAY_OPERATOR_CHART.version}"

# EKS managed add-ons (versions as `aws eks describe-addon-versions` lists them). Both are
# the default versions EKS reported for Kubernetes 1.35 in mid 2026 and are compatible
# with 1.33 to 1.35 (unverified here: no AWS API is reachable at build time).
EKS_POD_IDENTITY_AGENT_ADDON_VERSION = "v1.3.10-eksbuild.3"
MOUNTPOINT_S3_CSI_ADDON_VERSION = "v2.7.0-eksbuild.1"
# The FSx for Lustre CSI driver (weights.loader: fsx): driver release v1.9.0 (tag of
# kubernetes-sigs/aws-fsx-csi-driver, 2026-04-20), whose static provisioning example the
# PersistentVolumes follow (tests/upstream/); the eksbuild suffix is unverified here, like the
# add-ons above.
FSX_CSI_ADDON_VERSION = "v1.9.0-eksbuild.1"
# Lustre server version of the FSx file systems the stack creates: 2.15, the newer of the two
# PERSISTENT_2 accepts, whose client the FSx CSI driver's image ships.
LUSTRE_VERSION = "2.15"
# The VPC CNI, managed as an add-on so that its role comes through Pod Identity rather than
# the node role (unverified here, like the two above).
VPC_CNI_ADDON_VERSION = "v1.21.1-eksbuild.1"

# AWS Load Balancer Controller: turns the deployments' Ingresses into one Application Load
# Balancer. Chart and controller are released together (chart 3.5.0 = controller v3.5.0,
# 2026-08-03, the newest release at the time); the image tag is set explicitly so the pod runs
# the release whose IAM policy and annotations this project was written against
# (eks_inference/constructs/data/aws_load_balancer_controller_iam_policy.json).
AWS_LOAD_BALANCER_CONTROLLER_CHART = HelmChartVersion(
    chart="aws-load-balancer-controller",
    repository="https://aws.github.io/eks-charts",
    version="3.5.0",
)
AWS_LOAD_BALANCER_CONTROLLER_IMAGE = "public.ecr.aws/eks/aws-load-balancer-controller"
AWS_LOAD_BALANCER_CONTROLLER_IMAGE_TAG = "v3.5.0"
# External Secrets Operator: syncs the platform's API key from AWS Secrets Manager into a
# Kubernetes Secret. Chart 2.9.0 (2026-08-07) ships controller v2.9.0 and the
# external-secrets.io/v1 CRDs; the chart's image tag defaults to its appVersion, so the chart
# version pins the image.
EXTERNAL_SECRETS_CHART = HelmChartVersion(
    chart="external-secrets",
    repository="https://charts.external-secrets.io",
    version="2.9.0",
)

# Observability. kube-prometheus-stack 88.5.3 runs Prometheus Operator v0.93.1 (its CRDs, which
# tests/crds/ holds for validation, come with the chart), kube-state-metrics 2.20.0 (chart
# 8.4.0) and Grafana (chart 12.11.1); read from the chart's release tag in
# prometheus-community/helm-charts (a newer 92.x line was announced; unverified here).
KUBE_PROMETHEUS_STACK_CHART = HelmChartVersion(
    chart="kube-prometheus-stack",
    repository="https://prometheus-community.github.io/helm-charts",
    version="88.5.3",
)
PROMETHEUS_OPERATOR_VERSION = "0.93.1"
# NVIDIA DCGM exporter: chart 4.8.2 with image 4.5.3-4.8.2 (DCGM 4.5.3), from the release tag
# of NVIDIA/dcgm-exporter; the chart repository is that project's GitHub Pages (unverified).
DCGM_EXPORTER_CHART = HelmChartVersion(
    chart="dcgm-exporter",
    repository="https://nvidia.github.io/dcgm-exporter/helm-charts",
    version="4.8.2",
)
DCGM_EXPORTER_IMAGE_TAG = "4.5.3-4.8.2-distroless"
# KEDA 2.20.2 (chart and operator released together; the ScaledObject CRD in tests/crds/ is
# config/crd/bases/keda.sh_scaledobjects.yaml at kedacore/keda v2.20.2).
KEDA_CHART = HelmChartVersion(
    chart="keda",
    repository="https://kedacore.github.io/charts",
    version="2.20.2",
)
# neuron-monitor with its Prometheus exporter (neuron-monitor-prometheus.py), the image the
# Neuron Kubernetes operator deploys as its node-metrics exporter (unverified against ECR
# Public from here; Neuron's sample DaemonSet still names 1.0.0).
NEURON_MONITOR_IMAGE = "public.ecr.aws/neuron/neuron-monitor:1.10.0"
# Amazon EBS CSI driver (EKS add-on): Prometheus keeps its time series on a gp3 volume
# (unverified, like the add-ons above).
EBS_CSI_ADDON_VERSION = "v1.59.0-eksbuild.1"

# Karpenter (node_provisioning: karpenter). 1.14.1 (tag v1.14.1 of aws/karpenter-provider-aws,
# 2026-08-20) is the newest release in that repository and supports Kubernetes 1.35 (1.9+)
# and 1.36 (1.13+); the OCI registry itself is not reachable from here (unverified there).
# The CRDs come from their own chart, installed first, because Helm never upgrades the CRDs
# a chart ships in crds/; the controller chart pins its controller image by digest. The
# controller's IAM policy and interruption rules are those of the same release's reference
# CloudFormation template (eks_inference/constructs/data/karpenter_controller_policy.json).
KARPENTER_VERSION = "1.14.1"
KARPENTER_CHART = HelmChartVersion(
    chart="karpenter",
    repository="oci://public.ecr.aws/karpenter/karpenter",
    version=KARPENTER_VERSION,
)
KARPENTER_CRD_CHART = HelmChartVersion(
    chart="karpenter-crd",
    repository="oci://public.ecr.aws/karpenter/karpenter-crd",
    version=KARPENTER_VERSION,
)
# The EKS-optimized Amazon Linux 2023 AMI release Karpenter's nodes boot, as an `al2023@`
# alias: one alias resolves the standard, NVIDIA and Neuron variants for the cluster's
# Kubernetes version (Karpenter picks the variant by instance type), so GPU and Inferentia2
# nodes get the drivers their device plugins need. v20260714 (awslabs/amazon-eks-ami release
# notes) ships all three x86_64 variants for Kubernetes 1.33-1.35, with the NVIDIA 580 driver
# and aws-neuronx-dkms 2.29. Never `latest`: a new AMI is a reviewed change that Karpenter
# rolls out as drift.
EKS_AL2023_AMI_RELEASE = "v20260714"

# AWS CLI v2 for the Neuron compile job's upload step: the official image, from ECR Public
# rather than Docker Hub (no anonymous pull rate limit). EKS Pod Identity credentials need
# AWS CLI 2.15.0 or later; this tag is one the project saw published for amazon/aws-cli
# (unverified against ECR Public from here, which mirrors every release tag).
AWS_CLI_IMAGE = "public.ecr.aws/aws-cli/aws-cli:2.33.10"

# KServe on Knative Serving (engine: kserve), the versions KServe v0.20.0 is released and tested
# with (kserve-deps.env at tag v0.20.0 of kserve/kserve: Knative Serving 1.21.1, operator
# v1.21.1, cert-manager v1.17.0), each at its newest patch release. KServe's two charts come
# from its OCI registry; the controller image tag defaults to the chart's version.
KSERVE_VERSION = "v0.20.0"
KSERVE_CRD_CHART = HelmChartVersion(
    chart="kserve-crd", repository="oci://ghcr.io/kserve/charts/kserve-crd", version=KSERVE_VERSION
)
KSERVE_CHART = HelmChartVersion(
    chart="kserve-resources",
    repository="oci://ghcr.io/kserve/charts/kserve-resources",
    version=KSERVE_VERSION,
)
# The Knative Operator installs Knative Serving and its networking layer (Kourier) from the
# manifests it carries for each supported release (cmd/operator/kodata at tag knative-v1.21.4
# of knative/operator holds Serving 1.21.0 to 1.21.3); its Helm repository indexes the chart
# as v<version> (hack/find_helm_chart_releases_and_create_helm_index.sh).
KNATIVE_OPERATOR_CHART = HelmChartVersion(
    chart="knative-operator", repository="https://knative.github.io/operator", version="v1.21.4"
)
KNATIVE_SERVING_VERSION = "1.21.3"
# The Kourier gateway (Envoy): the operator's Kourier manifest names the floating tag
# `v1.36-latest`; this is the newest 1.36 patch release (2026-08-26, envoyproxy.io release
# history), set through the KnativeServing's image overrides.
KOURIER_GATEWAY_IMAGE = "docker.io/envoyproxy/envoy:v1.36.10"
# cert-manager issues the KServe webhook's certificate. 1.21.1 (2026-07-29) is the newest
# release; KServe's own pin (1.17.0) is out of support and predates Kubernetes 1.35.
CERT_MANAGER_CHART = HelmChartVersion(
    chart="cert-manager", repository="https://charts.jetstack.io", version="v1.21.1"
)
# NVIDIA Triton Inference Server (engine: triton), release 25.11 (server v2.63.0). Two NGC
# images of one release: the vLLM image (vLLM 0.11.0, with Triton's python and vllm
# backends) serves repositories with an LLM; the general image (onnxruntime, pytorch,
# tensorrt, python, ...) serves the others. Both are CUDA 13.0 builds for the 580 driver
# branch, the one the AL2023 NVIDIA AMI ships, so neither relies on CUDA's minor-version
# compatibility (the 26.x releases need 590 and later). Read from
# docs/introduction/compatibility.md of triton-inference-server/server at v2.71.0 (rows 25.11).
TRITON_RELEASE = "25.11"
TRITON_SERVER_VERSION = "2.63.0"
TRITON_VLLM_VERSION = "0.11.0"
TRITON_VLLM_IMAGE = f"nvcr.io/nvidia/tritonserver:{TRITON_RELEASE}-vllm-python-py3"
TRITON_IMAGE = f"nvcr.io/nvidia/tritonserver:{TRITON_RELEASE}-py3"
# NVIDIA Dynamo (engine: dynamo), release 1.6.1: the newest release checked from here (the
# ai-dynamo==1.6.1 wheel on PyPI, 2026; NVIDIA's docs list 1.6.2 and 1.7.0, which could not be
# checked). The runtime image runs the frontend and the vLLM workers; that release requires
# vLLM 0.31.0 (the wheel's `vllm[flashinfer,otel,runai]==0.31.0`, the support matrix's row
# for 1.6), whose engine arguments the workers take. The platform chart (operator, its CRDs,
# NATS) is the same release from NGC's public Helm repository.
DYNAMO_VERSION = "1.6.1"
DYNAMO_VLLM_VERSION = "0.31.0"
DYNAMO_RUNTIME_IMAGE = f"nvcr.io/nvidia/ai-dynamo/vllm-runtime:{DYNAMO_VERSION}"
# The workers of a graph whose KV cache crosses nodes: the AWS Deep Learning Containers
# Dynamo image "with EFA", Dynamo 1.6.2 over vLLM 0.31.0, x86_64
# (aws.github.io/deep-learning-containers/dynamo, "Images"; which EFA libraries it carries is
# not listed there). NGC's
# own `vllm-runtime:<release>-efa` tags are listed in Dynamo's release artifacts up to 1.2.0
# only as read from here; no 1.6.1 one could be checked. The image is a patch release
# ahead of DYNAMO_VERSION over the same vLLM (DYNAMO_EFA_VLLM_VERSION), so the workers'
# arguments are checked against 1.6.1's recorded worker parser
# (tests/upstream/dynamo-1.6.1-vllm-worker-options.txt): *unverified* that 1.6.2's own
# Dynamo options are the same, and that its workers and a 1.6.1 frontend speak alike.
DYNAMO_EFA_RELEASE = "1.6.2"
DYNAMO_EFA_VLLM_VERSION = "0.31.0"
DYNAMO_EFA_RUNTIME_IMAGE = (
    f"public.ecr.aws/deep-learning-containers/dynamo:{DYNAMO_EFA_RELEASE}-efa-vllm-runtime-v1"
)
DYNAMO_PLATFORM_CHART = HelmChartVersion(
    chart="dynamo-platform",
    repository="https://helm.ngc.nvidia.com/nvidia/ai-dynamo",
    version=DYNAMO_VERSION,
)
# Drift: the DynamoGraphDeployment schema and the platform chart's values the tests check
# against are upstream's tree at the 1.5.0 release (main of 2026-08-21), the newest that could
# be brought here whole; 1.6.1's own graphs (its wheel's templates) use the same v1beta1
# shape (`spec.components[]`: name, type, replicas, podTemplate), which the tests compare.
DYNAMO_CRD_SCHEMA_VERSION = "1.5.0"
# Prefix- and KV-cache-aware routing (``routing``): the Gateway API Inference Extension's
# InferencePool (GA as inference.networking.k8s.io/v1 in v1.6.0, whose CRD the routing add-on
# applies) and llm-d-router's endpoint picker (EPP) v0.10.0 with the Envoy its standalone chart
# runs in front of it. The EPP image is the one the release publishes under the release tag
# (.github/ISSUE_TEMPLATE/new-release.md at v0.10.0); the Envoy image is the one the pinned
# standalone chart's preset runs (config/charts/llm-d-router-standalone/values.yaml). Neither
# carries data, so both are pinned by tag.
INFERENCE_EXTENSION_VERSION = "v1.6.0"
LLM_D_ROUTER_VERSION = "v0.10.0"
ENDPOINT_PICKER_IMAGE = f"ghcr.io/llm-d/llm-d-router-endpoint-picker:{LLM_D_ROUTER_VERSION}"
ROUTING_PROXY_IMAGE = "docker.io/envoyproxy/envoy:distroless-v1.33.2"

# LeaderWorkerSet (multi_node: one replica across nodes): the controller and its CRD, from the
# project's chart at release v0.10.0 (charts/lws at that tag; published as an OCI chart of the
# same version on registry.k8s.io, as the LWS install guide has it; unverified against the
# registry from here). Its values default the controller image to the `main`
# tag, pulled Always: the add-on pins the release's tag instead.
LWS_VERSION = "0.10.0"
LWS_CHART = HelmChartVersion(
    chart="lws",
    repository="oci://registry.k8s.io/lws/charts/lws",
    version=LWS_VERSION,
)
LWS_IMAGE_TAG = f"v{LWS_VERSION}"

# The AWS EFA device plugin (node pools with efa): it advertises each node's Elastic Fabric
# Adapters as vpc.amazonaws.com/efa. Chart v0.5.30 of aws/eks-charts
# (stable/aws-efa-k8s-device-plugin, commit bfe91c4b9257c80f754ad4b3d6a9a3c239b2b8ec,
# 2026-07-21; its Chart.yaml spells the version with the "v"), whose appVersion, and the
# image tag its values set, is v0.5.20.
EFA_DEVICE_PLUGIN_CHART = HelmChartVersion(
    chart="aws-efa-k8s-device-plugin",
    repository="https://aws.github.io/eks-charts",
    version="v0.5.30",
)
EFA_DEVICE_PLUGIN_IMAGE_TAG = "v0.5.20"
# The plugin's image is served from the regional registries of EKS's own images, not a public
# one: the chart's default is this account's registry in us-west-2. The account serves most
# commercial regions; opt-in regions, China and GovCloud have registries of other accounts
# (the EKS User Guide's "View Amazon container image registries", unverified here per region).
EKS_IMAGE_REGISTRY_ACCOUNT = "602401143452"
