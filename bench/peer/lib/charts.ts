/**
 * A Helm release of a pinned chart for which eks-blueprints 1.19.0 has no add-on of its own:
 * the Neuron chart, the NVIDIA device plugin, kube-prometheus-stack and the DCGM exporter.
 * Written the way the eks-blueprints documentation has a custom add-on written: a HelmAddOn
 * subclass whose deploy() adds the chart. Like every blueprints Helm add-on it becomes a
 * HelmChart custom resource, so the chart is fetched at deploy time, never at synth.
 */
import * as blueprints from "@aws-quickstart/eks-blueprints";
import { Duration } from "aws-cdk-lib";
import { Construct } from "constructs";
import { PinnedChart } from "./facts";

export interface PinnedChartAddOnProps {
  /** The add-on's id among the blueprint's add-ons (what others wait for). */
  readonly id: string;
  readonly pinned: PinnedChart;
  readonly release: string;
  readonly namespace: string;
  readonly createNamespace?: boolean;
  readonly wait?: boolean;
  readonly timeout?: Duration;
  readonly values?: blueprints.Values;
}

export class PinnedChartAddOn extends blueprints.HelmAddOn {
  readonly id: string;
  private readonly options: PinnedChartAddOnProps;

  constructor(props: PinnedChartAddOnProps) {
    super({
      name: props.id,
      chart: props.pinned.chart,
      repository: props.pinned.repository,
      version: props.pinned.version,
      release: props.release,
      namespace: props.namespace,
      values: props.values ?? {},
    });
    this.id = props.id;
    this.options = props;
  }

  deploy(clusterInfo: blueprints.ClusterInfo): Promise<Construct> {
    return Promise.resolve(
      this.addHelmChart(
        clusterInfo,
        this.options.values,
        this.options.createNamespace,
        this.options.wait,
        this.options.timeout,
      ),
    );
  }
}
