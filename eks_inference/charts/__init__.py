"""Layer 3: the Kubernetes objects a validated platform is served by, as cdk8s charts.

Nothing here imports aws-cdk: the CDK constructs apply these charts to a cluster and
:mod:`eks_inference.charts.render` renders them for the manifest writer
(:mod:`eks_inference.output.writer`) to write to ``k8s_manifests/``, both from the same code.

- :mod:`~eks_inference.charts.deployment`: every chart of one deployment, in apply order.
- :mod:`~eks_inference.charts.serving`: the class an engine extends (the engines themselves,
  one package each, are :mod:`eks_inference.engines`, the layer above).
- :mod:`~eks_inference.charts.weights_loaders`: what a weights loader contributes to the servers.
- :mod:`~eks_inference.charts.pod`: the one pod builder; :mod:`~eks_inference.charts.contract`:
  the record of what each chart needs from the platform (:class:`PlatformNeeds`), which is all
  the constructs read.
- What every chart shares: :mod:`~eks_inference.charts.context` (the render context),
  :mod:`~eks_inference.charts.metadata` (labels and object metadata),
  :mod:`~eks_inference.charts.model_server` (the port, volumes and mount paths of every model
  server), :mod:`~eks_inference.charts.api_key` and :mod:`~eks_inference.charts.artifacts_gate`.
- One module per other chart: volumes, network policies, compile job, monitoring,
  autoscaling, endpoint, namespace, Karpenter.

Every node selector and toleration comes from a
:class:`~eks_inference.specification.platform.Placement`,
every name another object refers to from that object, and every image from
:mod:`eks_inference.versions` or the render context. Only :mod:`~eks_inference.charts.chart`
and the modules defining charts import cdk8s; the object builders are plain Python.
"""
