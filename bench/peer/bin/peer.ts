/**
 * The synth benchmark's peer: the reference cluster built the way platform teams build it today,
 * with @aws-quickstart/eks-blueprints (see ../README.md). `python -m bench.run` compiles this
 * with tsc and times `node dist/bin/peer.js` against our own reference app.
 *
 * What it builds, to match deployments.yaml of the Python project:
 * - EKS Kubernetes 1.35 (supported by eks-blueprints 1.19.0; it is also its default version),
 *   in a new VPC with the blueprints' default KMS key for secrets encryption;
 * - three managed node groups: system (m6i.2xlarge, 2 to 4), inf2 (inf2.48xlarge, 0 to 3,
 *   Neuron AMI, tainted) and g6e (g6e.2xlarge, 0 to 4, NVIDIA AMI, tainted);
 * - add-ons: KubeRay operator, Mountpoint for Amazon S3 CSI driver, Cluster Autoscaler and
 *   NVIDIA GPU operator (all Helm charts, installed at deploy time, nothing fetched at synth).
 *
 * Left out: NeuronDevicePluginAddOn, the Inferentia2 counterpart of the GPU operator. It
 * downloads its manifests from GitHub while synthesizing (loadExternalYaml), so it needs the
 * network at synth and the benchmark must run offline.
 *
 * The stack is environment-agnostic (no account or region), like the reference app without
 * context, so synth needs no AWS credentials, no network and no context lookups.
 */
import * as blueprints from "@aws-quickstart/eks-blueprints";
import * as cdk from "aws-cdk-lib";
import * as ec2 from "aws-cdk-lib/aws-ec2";
import * as eks from "aws-cdk-lib/aws-eks";

const NODE_POOL_LABEL = "eks-inference/node-pool";

/** The node group of one pool, sized and labelled like the reference app's. */
function nodeGroup(
  id: string,
  instanceType: string,
  minSize: number,
  maxSize: number,
  amiType: eks.NodegroupAmiType,
  taint?: string,
): blueprints.ManagedNodeGroup {
  return {
    id,
    nodegroupName: id,
    instanceTypes: [new ec2.InstanceType(instanceType)],
    minSize,
    maxSize,
    desiredSize: minSize,
    amiType,
    diskSize: taint === undefined ? 100 : 200,
    labels: { [NODE_POOL_LABEL]: id },
    taints:
      taint === undefined ? [] : [{ key: taint, value: "true", effect: eks.TaintEffect.NO_SCHEDULE }],
  };
}

const clusterProvider = new blueprints.GenericClusterProvider({
  version: eks.KubernetesVersion.V1_35,
  managedNodeGroups: [
    nodeGroup("system", "m6i.2xlarge", 2, 4, eks.NodegroupAmiType.AL2023_X86_64_STANDARD),
    nodeGroup(
      "inf2",
      "inf2.48xlarge",
      0,
      3,
      eks.NodegroupAmiType.AL2023_X86_64_NEURON,
      "aws.amazon.com/neuron",
    ),
    nodeGroup("g6e", "g6e.2xlarge", 0, 4, eks.NodegroupAmiType.AL2023_X86_64_NVIDIA, "nvidia.com/gpu"),
  ],
});

const app = new cdk.App();
blueprints.EksBlueprint.builder()
  // Environment-agnostic on purpose: the builder would otherwise take CDK_DEFAULT_ACCOUNT and
  // CDK_DEFAULT_REGION, which the CDK CLI sets from whatever AWS configuration it finds.
  .account(undefined)
  .region(undefined)
  .version(eks.KubernetesVersion.V1_35)
  .clusterProvider(clusterProvider)
  .addOns(
    new blueprints.addons.KubeRayAddOn(),
    new blueprints.addons.S3CSIDriverAddOn({ bucketNames: ["eks-inference-models-example"] }),
    new blueprints.addons.ClusterAutoScalerAddOn(),
    // The NVIDIA AMI of the g6e nodes ships the driver; the operator brings the rest.
    new blueprints.addons.GpuOperatorAddon({ values: { driver: { enabled: false } } }),
  )
  .buildAsync(app, "PeerStack")
  .then(() => app.synth())
  .catch((error: unknown) => {
    console.error(error);
    process.exitCode = 1;
  });
