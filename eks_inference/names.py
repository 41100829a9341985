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
# Service account of the Mountpoint for S3 CSI driver (EKS add-on), given S3 read by Pod Identity.
MOUNTPOINT_SERVICE_ACCOUNT = "s3-csi-driver-sa"
MOUNTPOINT_NAMESPACE = "kube-system"
# The custom resource our Ray Serve deployments are; KubeRay's operator chart installs its CRD.
RAYSERVICE_CRD = "rayservices.ray.io"
# Extended resources the device plugins advertise.
NEURONCORE_RESOURCE = "aws.amazon.com/neuroncore"
NEURON_DEVICE_RESOURCE = "aws.amazon.com/neuron"
NVIDIA_GPU_RESOURCE = "nvidia.com/gpu"

# A deployment's identities: its model servers, and its Neuron compile job.
SERVER_IDENTITY = "server"
COMPILE_IDENTITY = "compile"


def service_account_name(deployment_name: str) -> str:
    """Service account of a deployment's model-server pods (vLLM pods, Ray head and workers)."""
    return f"{deployment_name}-{SERVER_IDENTITY}"


def compile_service_account_name(deployment_name: str) -> str:
    """Service account of a deployment's Neuron compile job, the only writer of its artifacts."""
    return f"{deployment_name}-{COMPILE_IDENTITY}"
