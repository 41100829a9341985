/**
 * The reference platform's rendered manifests, applied the way the reference app applies them:
 * the cluster-wide ones (namespace, API key sync, exporters) in the cluster's stack, and each
 * model deployment's in a nested stack of its own, one KubernetesManifest per chart file in
 * apply order, with a Pod Identity role per service account that may read the deployment's
 * bucket prefixes. The YAML is read from the repository's k8s_manifests/ at synth (files,
 * no network). It is parsed as YAML 1.1, the version PyYAML writes it in, with the `yaml`
 * package: the blueprints' own helper (loadMultiResourceYaml) splits a file at every "---",
 * also inside a string, and so breaks on the Serve applications' embedded code.
 */
import * as blueprints from "@aws-quickstart/eks-blueprints";
import { NestedStack } from "aws-cdk-lib";
import * as eks from "aws-cdk-lib/aws-eks";
import * as iam from "aws-cdk-lib/aws-iam";
import * as s3 from "aws-cdk-lib/aws-s3";
import { Construct, IConstruct } from "constructs";
import * as fs from "fs";
import * as path from "path";
import { parseAllDocuments } from "yaml";
import { DeploymentFacts } from "./facts";

export const MODEL_BUCKET = "model-bucket";

type KubernetesObject = { kind?: string; metadata?: { name?: string; namespace?: string } };

function load(manifestsDir: string, file: string): KubernetesObject[] {
  const text = fs.readFileSync(path.join(manifestsDir, file), "utf8");
  return parseAllDocuments(text, { version: "1.1" })
    .map((document) => {
      if (document.errors.length > 0) {
        throw new Error(`${file}: ${document.errors[0].message}`);
      }
      return document.toJS() as KubernetesObject | null;
    })
    .filter((object): object is KubernetesObject => object !== null);
}

/** The manifest's construct id: its file name without the order number and extension. */
function manifestId(file: string): string {
  return path.basename(file, ".yaml").replace(/^\d+-/, "");
}

/** Waits for the add-ons named `after` (by their blueprint id) before it is deployed. */
async function providers(clusterInfo: blueprints.ClusterInfo, after: string[]): Promise<IConstruct[]> {
  return Promise.all(
    after.map((id) => {
      const scheduled = clusterInfo.getScheduledAddOn(id);
      if (scheduled === undefined) {
        throw new Error(`add-on ${id} must come before the manifests that need it`);
      }
      return scheduled;
    }),
  );
}

/** The cluster-wide manifests, each after the add-ons whose CRDs or namespaces it uses. */
export class PlatformManifestsAddOn implements blueprints.ClusterAddOn {
  readonly id = "PlatformManifests";

  constructor(
    private readonly manifestsDir: string,
    private readonly files: string[],
    private readonly after: string[],
  ) {}

  async deploy(clusterInfo: blueprints.ClusterInfo): Promise<Construct> {
    const cluster = clusterInfo.cluster;
    const scope = new Construct(cluster.stack, this.id);
    const waitFor = await providers(clusterInfo, this.after);
    for (const file of this.files) {
      const manifest = new eks.KubernetesManifest(scope, manifestId(file), {
        cluster,
        manifest: load(this.manifestsDir, file),
      });
      manifest.node.addDependency(...waitFor);
    }
    return scope;
  }
}

/** One model deployment in its own nested stack, applied after what its manifests need. */
export class DeploymentAddOn implements blueprints.ClusterAddOn {
  readonly id: string;

  constructor(
    private readonly manifestsDir: string,
    private readonly deployment: DeploymentFacts,
    private readonly after: string[],
  ) {
    this.id = `Deployment-${deployment.name}`;
  }

  async deploy(clusterInfo: blueprints.ClusterInfo): Promise<Construct> {
    const cluster = clusterInfo.cluster;
    const bucket = clusterInfo.getRequiredResource<s3.IBucket>(MODEL_BUCKET);
    const stack = new NestedStack(cluster.stack, this.id, {
      description: `Model deployment ${this.deployment.name}`,
    });
    const files = this.deployment.manifests.map((file) => ({
      file,
      objects: load(this.manifestsDir, file),
    }));
    const identities: IConstruct[] = [];
    for (const { objects } of files) {
      for (const account of objects.filter((o) => o.kind === "ServiceAccount")) {
        const name = account.metadata?.name ?? "";
        const role = new iam.Role(stack, `${name}-role`, {
          assumedBy: new iam.SessionTagsPrincipal(new iam.ServicePrincipal("pods.eks.amazonaws.com")),
        });
        for (const prefix of this.deployment.readPrefixes) {
          bucket.grantRead(role, `${prefix}*`);
        }
        const association = new eks.CfnPodIdentityAssociation(stack, `${name}-association`, {
          clusterName: cluster.clusterName,
          namespace: account.metadata?.namespace ?? "default",
          serviceAccount: name,
          roleArn: role.roleArn,
        });
        identities.push(role, association);
      }
    }
    let previous: IConstruct | undefined;
    for (const { file, objects } of files) {
      const manifest = new eks.KubernetesManifest(stack, manifestId(file), {
        cluster,
        manifest: objects,
      });
      manifest.node.addDependency(...identities, ...(previous ? [previous] : []));
      previous = manifest;
    }
    stack.node.addDependency(...(await providers(clusterInfo, this.after)));
    return stack;
  }
}
