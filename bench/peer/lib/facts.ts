/**
 * What the peer builds, as bench/peer.py writes it to dist/reference.json from the Python
 * project itself: the reference platform (deployments.yaml), the versions it pins
 * (eks_inference/versions.py) and the manifests `eks-inference manifests` wrote to
 * k8s_manifests/. The peer so installs the same releases on the same node pools as the
 * reference app, and a version changed there is changed here with no second copy of it.
 */
import * as fs from "fs";
import * as path from "path";

/** A Helm chart pinned to one version, as eks_inference.versions.HelmChartVersion. */
export interface PinnedChart {
  readonly chart: string;
  readonly repository: string;
  readonly version: string;
}

/** One node pool of the platform, as a managed node group takes it. */
export interface NodePoolFacts {
  readonly name: string;
  readonly instanceTypes: string[];
  readonly minSize: number;
  readonly maxSize: number;
  /** The EKS AMI type in the EKS API's spelling, e.g. AL2023_x86_64_NEURON. */
  readonly amiType: string;
  readonly diskSizeGib: number;
  readonly labels: Record<string, string>;
  readonly taints: { key: string; value: string }[];
}

/** One model deployment: its rendered manifests, and the bucket prefixes its pods read. */
export interface DeploymentFacts {
  readonly name: string;
  /** Paths relative to manifestsDir, in apply order. */
  readonly manifests: string[];
  readonly readPrefixes: string[];
}

export interface ReferenceFacts {
  readonly kubernetesVersion: string;
  readonly clusterName: string;
  readonly modelBucketName: string;
  readonly nodePools: NodePoolFacts[];
  /** EKS managed add-on name -> version (vpc-cni, eks-pod-identity-agent, aws-ebs-csi-driver). */
  readonly eksAddons: Record<string, string>;
  /** The Helm releases, by the reference app's add-on they come from. */
  readonly charts: {
    readonly neuron: PinnedChart;
    readonly nvidiaDevicePlugin: PinnedChart;
    readonly kuberay: PinnedChart;
    readonly clusterAutoscaler: PinnedChart;
    readonly kubePrometheusStack: PinnedChart;
    readonly dcgmExporter: PinnedChart;
    readonly keda: PinnedChart;
    readonly awsLoadBalancerController: PinnedChart;
    readonly externalSecrets: PinnedChart;
  };
  /** The namespaces the reference app installs its operators into. */
  readonly namespaces: { readonly kuberay: string; readonly monitoring: string; readonly keda: string };
  /** The repository's k8s_manifests/, absolute. */
  readonly manifestsDir: string;
  /** The cluster-wide manifests (namespace, API key sync, exporters), relative to manifestsDir. */
  readonly platformManifests: string[];
  readonly deployments: DeploymentFacts[];
}

/** dist/reference.json, beside the compiled app. */
export function loadFacts(): ReferenceFacts {
  const file = path.join(__dirname, "..", "reference.json");
  return JSON.parse(fs.readFileSync(file, "utf8")) as ReferenceFacts;
}
