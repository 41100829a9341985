"""Names shared between the add-ons the cluster installs and the manifests that rely on them.

Each is defined once here so that, for example, the scheduler a pod asks for is the scheduler
the Neuron chart installs, and the label a pod selects on is the label the node group carries.
"""

# Label every managed node group carries with its pool name; pods select on it.
NODE_POOL_LABEL = "eks-inference.io/node-pool"
# Second scheduler installed by the Neuron Helm chart; it places a pod on contiguous
# NeuronCores, which matters when a pod takes part of a node's cores.
NEURON_SCHEDULER_NAME = "neuron-scheduler"
# Namespace the model servers run in.
INFERENCE_NAMESPACE = "inference"
# Address range of the VPC the cluster creates. The VPC CNI gives pods addresses in it, and the
# load balancer reaches them (target type ip) from its own addresses in it.
VPC_CIDR = "10.0.0.0/16"
# Service account of the Mountpoint for S3 CSI driver (EKS add-on), given S3 read by Pod Identity.
MOUNTPOINT_SERVICE_ACCOUNT = "s3-csi-driver-sa"
# The FSx for Lustre CSI driver's controller (its chart's and EKS add-on's default name).
FSX_CSI_SERVICE_ACCOUNT = "fsx-csi-controller-sa"
MOUNTPOINT_NAMESPACE = "kube-system"
# The custom resource our Ray Serve deployments are; KubeRay's operator chart installs its CRD.
RAYSERVICE_CRD = "rayservices.ray.io"
# Where the KubeRay operator runs; it calls every Ray head's dashboard from there.
KUBERAY_NAMESPACE = "kuberay-system"
# Extended resources the device plugins advertise.
NEURONCORE_RESOURCE = "aws.amazon.com/neuroncore"
NEURON_DEVICE_RESOURCE = "aws.amazon.com/neuron"
NVIDIA_GPU_RESOURCE = "nvidia.com/gpu"
# Elastic Fabric Adapter interfaces, as the EFA device plugin advertises them.
EFA_RESOURCE = "vpc.amazonaws.com/efa"

# The IngressClass the AWS Load Balancer Controller's chart creates; deployments' Ingresses
# name it, so an Application Load Balancer is made for them.
ALB_INGRESS_CLASS = "alb"
# The Kubernetes Secret holding the platform's API key (synced from AWS Secrets Manager by the
# External Secrets Operator), and its key; model servers read it into their environment.
API_KEY_SECRET = "eks-inference-api-key"
API_KEY_SECRET_KEY = "api-key"

# Standard labels every object and pod of a deployment carries: its deployment (instance) and
# its part (component). Selectors, scrape relabelings and kube-state-metrics joins read them.
INSTANCE_LABEL = "app.kubernetes.io/instance"
COMPONENT_LABEL = "app.kubernetes.io/component"
# The Serve deployment that holds the model replicas of the Neuron Serve application.
NEURON_SERVER_DEPLOYMENT = "NeuronLLMServer"
# Where the metrics stack runs (kube-prometheus-stack, neuron-monitor), its release name (the
# chart's fullname, so the Prometheus Service is `<it>-prometheus`), Prometheus' port, and the
# label the Grafana sidecar loads dashboard ConfigMaps by, from every namespace.
MONITORING_NAMESPACE = "monitoring"
KUBE_PROMETHEUS_STACK_NAME = "kube-prometheus-stack"
# The chart's Prometheus resource, its Service and its pods' `app.kubernetes.io/instance`.
PROMETHEUS_NAME = f"{KUBE_PROMETHEUS_STACK_NAME}-prometheus"
PROMETHEUS_PORT = 9090
GRAFANA_DASHBOARD_LABEL = "grafana_dashboard"
KEDA_NAMESPACE = "keda"

# Karpenter (node_provisioning: karpenter): the tag its EC2NodeClasses find subnets and the
# node security group by (valued with the cluster's name), and the pod annotation that keeps
# it from voluntarily disrupting the pod's node (a Go duration, or "true" for always).
KARPENTER_DISCOVERY_TAG = "karpenter.sh/discovery"
# The index of a private subnet's zone in the VPC's zones, on the subnets of a VPC the cluster
# creates when a pool names zones: Karpenter selects a zone-pinned pool's subnets by it.
ZONE_TAG = "eks-inference/zone"
KARPENTER_DO_NOT_DISRUPT_ANNOTATION = "karpenter.sh/do-not-disrupt"
# Karpenter's node role is named by the convention of its documentation, so that the
# EC2NodeClasses in k8s_manifests/ name the role the CloudFormation template creates.
_KARPENTER_NODE_ROLE_PREFIX = "KarpenterNodeRole-"
# IAM role names are at most 64 characters.
MAX_ROLE_NAME_LENGTH = 64

# A deployment's identities: its model servers, and its Neuron compile job.
SERVER_IDENTITY = "server"
COMPILE_IDENTITY = "compile"


def service_account_name(deployment_name: str) -> str:
    """Service account of a deployment's model-server pods (vLLM pods, Ray head and workers)."""
    return f"{deployment_name}-{SERVER_IDENTITY}"


def ray_serve_service_name(deployment_name: str) -> str:
    """The Service KubeRay creates for a RayService's Serve proxies: ``<name>-serve-svc``."""
    return f"{deployment_name}-serve-svc"


def ray_head_service_name(deployment_name: str) -> str:
    """The Service KubeRay creates for a RayService's head: ``<name>-head-svc``."""
    return f"{deployment_name}-head-svc"


def compile_service_account_name(deployment_name: str) -> str:
    """Service account of a deployment's Neuron compile job, the only writer of its artifacts."""
    return f"{deployment_name}-{COMPILE_IDENTITY}"


def prometheus_url() -> str:
    """In-cluster URL of the Prometheus that kube-prometheus-stack runs (KEDA queries it)."""
    return f"http://{PROMETHEUS_NAME}.{MONITORING_NAMESPACE}.svc:{PROMETHEUS_PORT}"


def karpenter_node_role_name(cluster_name: str) -> str:
    """IAM role of the nodes Karpenter launches for ``cluster_name``."""
    return f"{_KARPENTER_NODE_ROLE_PREFIX}{cluster_name}"


# KServe on Knative Serving (engine: kserve). The KServe chart installs the InferenceService
# CRD; the Knative Operator runs Knative Serving in its namespace and the Kourier gateway in
# its own (both names fixed by the operator's manifests at knative-v1.21.4), where the gateway's
# cluster-local listener is the Service `kourier-internal` (port 80 to the pods' 8081).
INFERENCESERVICE_CRD = "inferenceservices.serving.kserve.io"
KSERVE_NAMESPACE = "kserve"
KNATIVE_SERVING_NAMESPACE = "knative-serving"
KOURIER_NAMESPACE = "kourier-system"
KOURIER_INTERNAL_SERVICE = "kourier-internal"
KOURIER_INTERNAL_PORT = 80
# Pod labels of the Kourier gateway and of Knative's activator and autoscaler.
KOURIER_GATEWAY_LABELS = {"app": "3scale-kourier-gateway"}
KNATIVE_ACTIVATOR_LABELS = {"app": "activator"}
KNATIVE_AUTOSCALER_LABELS = {"app": "autoscaler"}


def kserve_predictor_name(deployment_name: str) -> str:
    """The Knative Service KServe makes for an InferenceService's predictor: ``<name>-predictor``.

    Knative serves it on the gateway's cluster-local listener as
    ``<name>-predictor.<namespace>.svc.cluster.local``, and names its revisions after it.
    """
    return f"{deployment_name}-predictor"


# NVIDIA Dynamo (engine: dynamo). The platform chart installs the operator and its CRDs, and
# NATS (the event plane the KV router's events travel on) in the platform's namespace; the
# operator's discovery is Kubernetes' own (no etcd). NATS is the chart's subchart, named after
# the release (`<release>-nats`), on its client port.
DYNAMOGRAPHDEPLOYMENT_CRD = "dynamographdeployments.nvidia.com"
DYNAMO_NAMESPACE = "dynamo-system"
DYNAMO_PLATFORM_RELEASE = "dynamo-platform"
DYNAMO_NATS_LABELS = {"app.kubernetes.io/name": "nats"}
DYNAMO_NATS_PORT = 4222
# The graph component a Dynamo pod belongs to (frontend, worker, prefill, decode).
DYNAMO_WORKER_ROLE_LABEL = "eks-inference.io/dynamo-component"
# Routing through the endpoint picker (``routing``): the InferencePool CRD, and the Services of
# a deployment's picker (the EPP's ext-proc and metrics) and proxy (what the load balancer
# forwards to).
INFERENCEPOOL_CRD = "inferencepools.inference.networking.k8s.io"
PICKER_ROLE = "picker"
PROXY_ROLE = "proxy"


def picker_service_name(deployment_name: str) -> str:
    """The Service of a deployment's endpoint picker (the EPP)."""
    return f"{deployment_name}-{PICKER_ROLE}"


def proxy_service_name(deployment_name: str) -> str:
    """The Service of a deployment's routing proxy, the load balancer's backend."""
    return f"{deployment_name}-{PROXY_ROLE}"


# The proxy's clusters: requests to the endpoint the picker named, and those it named none
# for (the picker down, failing open), which go round robin to the deployment's Service.
# Their request counters are how the fall-back is observed.
PICKED_CLUSTER = "picked_endpoint"
FALLBACK_CLUSTER = "round_robin_fallback"
# LeaderWorkerSet (multi_node): its controller's chart installs the CRD; the controller labels
# every pod of a set with the set's name and each pod's index in its group (0: the leader),
# and gives each container the leader's address (pkg/utils/pod and the LWS API, v0.10.0).
LEADERWORKERSET_CRD = "leaderworkersets.leaderworkerset.x-k8s.io"
LWS_NAMESPACE = "lws-system"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_LEADER_ADDRESS_ENV = "LWS_LEADER_ADDRESS"
