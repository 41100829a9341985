/**
 * The synth benchmark's peer: the reference app's platform built the way platform teams build
 * EKS clusters today, with @aws-quickstart/eks-blueprints (see ../README.md for what it
 * installs beside the reference app, and what it leaves out).
 *
 * The stack is environment-agnostic (no account or region), like the reference app without
 * context, so synth needs no AWS credentials, no network and no context lookups. Every EKS
 * managed add-on is given its version: the blueprints' "auto" would ask the EKS API at synth.
 */
import * as blueprints from "@aws-quickstart/eks-blueprints";
import { App, Aws, Duration, Fn, Stack } from "aws-cdk-lib";
import * as ec2 from "aws-cdk-lib/aws-ec2";
import * as eks from "aws-cdk-lib/aws-eks";
import * as iam from "aws-cdk-lib/aws-iam";
import * as logs from "aws-cdk-lib/aws-logs";
import * as s3 from "aws-cdk-lib/aws-s3";
import * as secretsmanager from "aws-cdk-lib/aws-secretsmanager";
import { PinnedChartAddOn } from "./charts";
import { DeploymentAddOn, MODEL_BUCKET, PlatformManifestsAddOn } from "./deployments";
import { NodePoolFacts, ReferenceFacts } from "./facts";

export const STACK_NAME = "PeerStack";
const VPC_CIDR = "10.0.0.0/16";
const ZONES = 3;
const SYSTEM_NAMESPACE = "kube-system";
const API_KEY_SECRET = "api-key";

/** The managed node group of one pool: its instance types, size, AMI, disk, labels, taints. */
function nodeGroup(pool: NodePoolFacts): blueprints.ManagedNodeGroup {
  return {
    id: pool.name,
    nodegroupName: pool.name,
    instanceTypes: pool.instanceTypes.map((type) => new ec2.InstanceType(type)),
    minSize: pool.minSize,
    maxSize: pool.maxSize,
    desiredSize: pool.minSize,
    amiType: pool.amiType as eks.NodegroupAmiType,
    diskSize: pool.diskSizeGib,
    labels: pool.labels,
    taints: pool.taints.map((t) => ({ key: t.key, value: t.value, effect: eks.TaintEffect.NO_SCHEDULE })),
  };
}

/** A VPC like the reference app's: three zones chosen by CloudFormation, a NAT gateway per
 * zone, an S3 gateway endpoint and flow logs. The aws-eks cluster tags its subnets for the load
 * balancer controller itself. */
const vpcProvider: blueprints.ResourceProvider<ec2.IVpc> = {
  provide(context: blueprints.ResourceContext): ec2.IVpc {
    const vpc = new ec2.Vpc(context.scope, "Vpc", {
      ipAddresses: ec2.IpAddresses.cidr(VPC_CIDR),
      availabilityZones: [...Array(ZONES).keys()].map((i) => Fn.select(i, Fn.getAzs())),
      natGateways: ZONES,
      gatewayEndpoints: { S3: { service: ec2.GatewayVpcEndpointAwsService.S3 } },
    });
    vpc.addFlowLog("FlowLog", {
      destination: ec2.FlowLogDestination.toCloudWatchLogs(
        new logs.LogGroup(context.scope, "FlowLogs", { retention: logs.RetentionDays.THREE_MONTHS }),
      ),
    });
    return vpc;
  },
};

/** The endpoints' API key, generated in Secrets Manager. */
function apiKeyProvider(facts: ReferenceFacts): blueprints.ResourceProvider<secretsmanager.ISecret> {
  return {
    provide(context: blueprints.ResourceContext): secretsmanager.ISecret {
      return new secretsmanager.Secret(context.scope, "ApiKey", {
        secretName: `${facts.clusterName}/api-key`,
        generateSecretString: { passwordLength: 48, excludePunctuation: true },
      });
    },
  };
}

/** Builds the peer's stack in `app`; resolves once every add-on has been added. */
export async function buildPeer(app: App, facts: ReferenceFacts): Promise<Stack> {
  const version = eks.KubernetesVersion.of(facts.kubernetesVersion);
  // bench/peer.py lists the system pool first.
  const system = facts.nodePools[0];
  const onSystem = { nodeSelector: system.labels };
  const neuronPools = facts.nodePools.filter((p) => p.amiType.endsWith("_NEURON"));
  const gpuPools = facts.nodePools.filter((p) => p.amiType.endsWith("_NVIDIA"));
  const tolerating = (pools: NodePoolFacts[]) =>
    pools.flatMap((p) => p.taints.map((t) => ({ ...t, operator: "Equal", effect: "NoSchedule" })));
  const charts = facts.charts;
  const ns = facts.namespaces;

  const clusterProvider = new blueprints.GenericClusterProvider({
    version,
    endpointAccess: eks.EndpointAccess.PRIVATE,
    managedNodeGroups: facts.nodePools.map(nodeGroup),
  });
  // The External Secrets Operator may read the API key and nothing else.
  const readApiKey = new iam.PolicyStatement({
    actions: ["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"],
    resources: [
      `arn:${Aws.PARTITION}:secretsmanager:${Aws.REGION}:${Aws.ACCOUNT_ID}:secret:${facts.clusterName}/api-key-*`,
    ],
  });
  const kubePrometheusStack = new PinnedChartAddOn({
    id: "KubePrometheusStack",
    pinned: charts.kubePrometheusStack,
    release: "kube-prometheus-stack",
    namespace: ns.monitoring,
    createNamespace: true,
    timeout: Duration.minutes(15),
    values: {
      prometheusOperator: onSystem,
      prometheus: {
        prometheusSpec: {
          ...onSystem,
          retention: "15d",
          retentionSize: "40GB",
          podMonitorSelectorNilUsesHelmValues: false,
          serviceMonitorSelectorNilUsesHelmValues: false,
          ruleSelectorNilUsesHelmValues: false,
          storageSpec: {
            volumeClaimTemplate: {
              spec: {
                storageClassName: "gp3",
                accessModes: ["ReadWriteOnce"],
                resources: { requests: { storage: "50Gi" } },
              },
            },
          },
        },
      },
      alertmanager: { alertmanagerSpec: onSystem },
      grafana: { ...onSystem, sidecar: { dashboards: { enabled: true, searchNamespace: "ALL" } } },
    },
  });
  const deploymentsNeed = [
    "KubeRayAddOn",
    "S3CSIDriverAddOn",
    kubePrometheusStack.id,
    "KedaAddOn",
    "AwsLoadBalancerControllerAddOn",
    "ExternalsSecretsAddOn",
    "PlatformManifests",
  ];

  const stack = await blueprints.EksBlueprint.builder()
    // Environment-agnostic on purpose: the builder would otherwise take CDK_DEFAULT_ACCOUNT and
    // CDK_DEFAULT_REGION, which the CDK CLI sets from whatever AWS configuration it finds.
    .account(undefined)
    .region(undefined)
    .version(version)
    .enableControlPlaneLogTypes(
      blueprints.ControlPlaneLogType.API,
      blueprints.ControlPlaneLogType.AUDIT,
      blueprints.ControlPlaneLogType.AUTHENTICATOR,
      blueprints.ControlPlaneLogType.CONTROLLER_MANAGER,
      blueprints.ControlPlaneLogType.SCHEDULER,
    )
    .resourceProvider(blueprints.GlobalResources.Vpc, vpcProvider)
    .resourceProvider(
      MODEL_BUCKET,
      new blueprints.CreateS3BucketProvider({
        id: "ModelBucket",
        name: facts.modelBucketName,
        s3BucketProps: {
          blockPublicAccess: s3.BlockPublicAccess.BLOCK_ALL,
          encryption: s3.BucketEncryption.S3_MANAGED,
          enforceSSL: true,
          versioned: true,
        },
      }),
    )
    .resourceProvider(API_KEY_SECRET, apiKeyProvider(facts))
    .clusterProvider(clusterProvider)
    .addOns(
      new blueprints.addons.VpcCniAddOn({
        version: facts.eksAddons["vpc-cni"],
        enableNetworkPolicy: true,
        serviceAccountPolicies: [iam.ManagedPolicy.fromAwsManagedPolicyName("AmazonEKS_CNI_Policy")],
      }),
      new blueprints.addons.EksPodIdentityAgentAddOn(facts.eksAddons["eks-pod-identity-agent"]),
      new PinnedChartAddOn({
        id: "NeuronChart",
        pinned: charts.neuron,
        release: "neuron",
        namespace: SYSTEM_NAMESPACE,
        values: {
          neuronInstances: neuronPools.flatMap((p) => p.instanceTypes),
          devicePlugin: { tolerations: tolerating(neuronPools) },
          scheduler: { enabled: true, ...onSystem, customScheduler: { enabled: true, ...onSystem } },
          npd: { namespaceOverride: SYSTEM_NAMESPACE },
        },
      }),
      new PinnedChartAddOn({
        id: "NvidiaDevicePlugin",
        pinned: charts.nvidiaDevicePlugin,
        release: "nvidia-device-plugin",
        namespace: SYSTEM_NAMESPACE,
        values: {
          nodeSelector: { "nvidia.com/gpu.present": "true" },
          tolerations: tolerating(gpuPools),
        },
      }),
      new blueprints.addons.KubeRayAddOn({
        version: charts.kuberay.version,
        namespace: ns.kuberay,
        values: onSystem,
      }),
      new blueprints.addons.S3CSIDriverAddOn({ bucketNames: [facts.modelBucketName] }),
      new blueprints.addons.ClusterAutoScalerAddOn({
        version: charts.clusterAutoscaler.version,
        values: onSystem,
      }),
      new blueprints.addons.EbsCsiDriverAddOn({ version: facts.eksAddons["aws-ebs-csi-driver"] }),
      kubePrometheusStack,
      new PinnedChartAddOn({
        id: "DcgmExporter",
        pinned: charts.dcgmExporter,
        release: "dcgm-exporter",
        namespace: ns.monitoring,
        values: {
          nodeSelector: { "nvidia.com/gpu.present": "true" },
          tolerations: tolerating(gpuPools),
          serviceMonitor: { enabled: true, honorLabels: true },
        },
      }),
      new blueprints.addons.KedaAddOn({
        version: charts.keda.version,
        namespace: ns.keda,
        values: onSystem,
      }),
      new blueprints.addons.AwsLoadBalancerControllerAddOn({
        version: charts.awsLoadBalancerController.version,
        values: onSystem,
      }),
      new blueprints.addons.ExternalsSecretsAddOn({
        version: charts.externalSecrets.version,
        iamPolicies: [readApiKey],
        values: { installCRDs: true, global: onSystem },
      }),
      new PlatformManifestsAddOn(facts.manifestsDir, facts.platformManifests, [
        kubePrometheusStack.id,
        "ExternalsSecretsAddOn",
      ]),
      ...facts.deployments.map(
        (deployment) => new DeploymentAddOn(facts.manifestsDir, deployment, deploymentsNeed),
      ),
    )
    .buildAsync(app, STACK_NAME);
  return stack;
}
