"""Routing through the endpoint picker: the objects of ``examples/prefix-routing.yaml`` checked
against the pinned InferencePool CRD, Kubernetes 1.35 and the pinned EPP's recorded table, and a
request's path through them followed reference by reference."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import kubernetes_validate
import pytest
import yaml

from eks_inference import names
from eks_inference.charts import routing, routing_proxy
from eks_inference.charts.render import render_platform
from eks_inference.constructs.addons.inference_extension import inferencepool_crd
from eks_inference.names import COMPONENT_LABEL, INSTANCE_LABEL
from eks_inference.specification.platform import PlatformSpec
from eks_inference.versions import KUBERNETES_VERSION
from tests.helpers.objects import crd_validator, of_kind, schema_errors
from tests.helpers.platforms import CRDS, UPSTREAM, example
from tests.helpers.rendered import CONTEXT

POOL_CRD = CRDS / "inference.networking.k8s.io_inferencepools.yaml"
EPP_TABLE = UPSTREAM / "llm-d-router-v0.10.0-epp.txt"
NAME = "llm-routed"


def _platform(**routing_fields: Any) -> PlatformSpec:
    data = example("prefix-routing")
    (deployment,) = data["deployments"]
    deployment["name"] = NAME
    deployment.pop("routing")
    if routing_fields:
        deployment["routing"] = routing_fields
    return PlatformSpec.model_validate(data)


@cache
def _objects(failure_mode: str = "fail_open", picker: str = "prefix_cache") -> list[Any]:
    platform = _platform(picker=picker, failure_mode=failure_mode)
    return render_platform(platform, CONTEXT)[NAME]


def _named(kind: str, name: str, objects: list[Any] | None = None) -> dict[str, Any]:
    (found,) = [o for o in of_kind(objects or _objects(), kind) if o["metadata"]["name"] == name]
    return found


def _table(kind: str) -> set[str]:
    rows = [line.split("\t") for line in EPP_TABLE.read_text().splitlines()]
    return {row[1] for row in rows if row[0] == kind}


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def _template_labels(deployment: dict[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = deployment["spec"]["template"]["metadata"]["labels"]
    return labels


def _container_ports(deployment: dict[str, Any]) -> dict[int, str]:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {p["containerPort"]: p["name"] for p in container["ports"]}


def _proxy_config(objects: list[Any] | None = None) -> dict[str, Any]:
    config = _named("ConfigMap", names.proxy_service_name(NAME), objects)
    parsed: dict[str, Any] = yaml.safe_load(config["data"][routing_proxy.PROXY_CONFIG_FILE])
    return parsed


def _clusters(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in config["static_resources"]["clusters"]}


def _address(cluster: dict[str, Any]) -> tuple[str, int]:
    (endpoints,) = cluster["load_assignment"]["endpoints"]
    (endpoint,) = endpoints["lb_endpoints"]
    socket = endpoint["endpoint"]["address"]["socket_address"]
    return socket["address"], socket["port_value"]


def _listener(config: dict[str, Any], name: str) -> dict[str, Any]:
    (listener,) = [x for x in config["static_resources"]["listeners"] if x["name"] == name]
    (chain,) = listener["filter_chains"]
    (manager,) = chain["filters"]
    typed: dict[str, Any] = manager["typed_config"]
    return {"port": listener["address"]["socket_address"]["port_value"], **typed}


def test_the_inference_pool_validates_against_the_pinned_v1_crd() -> None:
    (pool,) = of_kind(_objects(), "InferencePool")
    assert pool["apiVersion"] == "inference.networking.k8s.io/v1"
    assert schema_errors(crd_validator(POOL_CRD, "v1"), pool) == []


def test_the_packaged_crd_is_the_pinned_one() -> None:
    (pinned,) = [d for d in yaml.safe_load_all(POOL_CRD.read_text()) if d]
    assert inferencepool_crd() == pinned
    assert pinned["metadata"]["name"] == names.INFERENCEPOOL_CRD


@pytest.mark.parametrize("failure_mode", ["fail_open", "fail_closed"])
def test_every_other_object_validates_strictly_against_kubernetes(failure_mode: str) -> None:
    core = [o for o in _objects(failure_mode) if o["kind"] != "InferencePool"]
    kinds = {o["kind"] for o in core}
    assert {"Role", "RoleBinding", "Deployment", "Service", "NetworkPolicy"} <= kinds
    for obj in core:
        if obj["apiVersion"].startswith("monitoring.coreos.com"):
            continue
        assert kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def test_a_request_follows_the_load_balancer_to_the_pods_through_the_picker() -> None:
    objects = _objects()
    # ALB rule -> the proxy's Service, on a port it has.
    ingress = _named("Ingress", NAME)
    backends = [p["backend"]["service"] for p in ingress["spec"]["rules"][0]["http"]["paths"]]
    assert backends
    proxy_service = _named("Service", names.proxy_service_name(NAME))
    for backend in backends:
        assert backend["name"] == proxy_service["metadata"]["name"]
        (service_port,) = [
            p for p in proxy_service["spec"]["ports"] if p["port"] == backend["port"]["number"]
        ]
    # The Service -> the proxy's pods, on their listening port.
    proxy = _named("Deployment", names.proxy_service_name(NAME))
    assert _selects(proxy_service["spec"]["selector"], _template_labels(proxy))
    assert _container_ports(proxy)[service_port["targetPort"]] == "http"
    config = _proxy_config(objects)
    assert _listener(config, "routed")["port"] == service_port["targetPort"]
    # The proxy -> the picker's Service, on its ext_proc port -> the picker's pods.
    clusters = _clusters(config)
    picker_service = _named("Service", names.picker_service_name(NAME))
    host, port = _address(clusters[routing_proxy.PICKER_CLUSTER])
    assert host == f"{picker_service['metadata']['name']}.inference.svc.cluster.local"
    (ext_proc,) = [p for p in picker_service["spec"]["ports"] if p["port"] == port]
    picker = _named("Deployment", names.picker_service_name(NAME))
    assert _selects(picker_service["spec"]["selector"], _template_labels(picker))
    assert _container_ports(picker)[ext_proc["targetPort"]] == "grpc"
    # The InferencePool -> the picker's Service and port, and the deployment's serving pods.
    pool = _named("InferencePool", NAME)
    reference = pool["spec"]["endpointPickerRef"]
    assert (reference["kind"], reference["name"]) == ("Service", picker_service["metadata"]["name"])
    assert reference["port"]["number"] == ext_proc["port"]
    servers = _named("Deployment", NAME)
    assert _selects(pool["spec"]["selector"]["matchLabels"], _template_labels(servers))
    for other in (proxy, picker):
        assert not _selects(pool["spec"]["selector"]["matchLabels"], _template_labels(other))
    (target,) = pool["spec"]["targetPorts"]
    assert _container_ports(servers)[target["number"]] == "http"
    # The picker watches that very pool.
    args = picker["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--pool-name") + 1] == pool["metadata"]["name"]
    assert args[args.index("--pool-namespace") + 1] == pool["metadata"]["namespace"]
    # The fallback goes to the servers' own Service, on the port its pods serve.
    server_service = _named("Service", NAME)
    host, port = _address(clusters[routing_proxy.FALLBACK_CLUSTER])
    assert host == f"{NAME}.inference.svc.cluster.local"
    (server_port,) = [p for p in server_service["spec"]["ports"] if p["port"] == port]
    assert _selects(server_service["spec"]["selector"], _template_labels(servers))
    assert server_port["targetPort"] in (target["number"], "http")


def test_the_load_balancer_checks_the_proxy_itself_not_the_picker() -> None:
    annotations = _named("Ingress", NAME)["metadata"]["annotations"]
    assert (
        annotations["alb.ingress.kubernetes.io/healthcheck-path"] == routing_proxy.PROXY_READY_PATH
    )
    port = int(annotations["alb.ingress.kubernetes.io/healthcheck-port"])
    proxy = _named("Deployment", names.proxy_service_name(NAME))
    assert port in _container_ports(proxy)
    ready = _listener(_proxy_config(), "ready")
    assert ready["port"] == port
    (health, _) = ready["http_filters"]
    assert health["typed_config"]["pass_through_mode"] is False
    assert (
        health["typed_config"]["headers"][0]["string_match"]["exact"]
        == routing_proxy.PROXY_READY_PATH
    )


def test_a_clients_destination_header_is_removed_before_the_picker_sees_it() -> None:
    routed = _listener(_proxy_config(), "routed")
    (early,) = routed["early_header_mutation_extensions"]
    assert early["typed_config"]["mutations"] == [{"remove": routing_proxy.DESTINATION_HEADER}]
    picked = _clusters(_proxy_config())[routing_proxy.PICKED_CLUSTER]
    assert picked["original_dst_lb_config"]["http_header_name"] == routing_proxy.DESTINATION_HEADER


def test_the_failure_mode_reaches_the_pool_and_the_proxy() -> None:
    for mode, pool_mode, allowed in (
        ("fail_open", "FailOpen", True),
        ("fail_closed", "FailClose", False),
    ):
        objects = _objects(mode)
        assert (
            _named("InferencePool", NAME, objects)["spec"]["endpointPickerRef"]["failureMode"]
            == pool_mode
        )
        routed = _listener(_proxy_config(objects), "routed")
        ext_proc = routed["http_filters"][0]["typed_config"]
        assert ext_proc["failure_mode_allow"] is allowed
        (picked, unpicked) = routed["route_config"]["virtual_hosts"][0]["routes"]
        assert picked["route"]["cluster"] == routing_proxy.PICKED_CLUSTER
        if allowed:
            assert unpicked["route"]["cluster"] == routing_proxy.FALLBACK_CLUSTER
        else:
            assert unpicked["direct_response"]["status"] == 503


def test_the_picker_config_uses_only_what_the_pinned_release_defines() -> None:
    fields, plugins = _table("field"), _table("plugin")
    for picker, scorers in (("prefix_cache", 3), ("kv_cache_load", 2)):
        config = _named("ConfigMap", names.picker_service_name(NAME), _objects(picker=picker))
        parsed = yaml.safe_load(config["data"][routing.CONFIG_FILE])
        assert parsed["apiVersion"] == "llm-d.ai/v1alpha1"
        assert {
            f"EndpointPickerConfig.{k}" for k in parsed if k not in ("apiVersion", "kind")
        } <= fields
        for plugin in parsed["plugins"]:
            assert {f"PluginSpec.{k}" for k in plugin} <= fields
            assert plugin["type"] in plugins
        (profile,) = parsed["schedulingProfiles"]
        assert {f"SchedulingProfile.{k}" for k in profile} <= fields
        assert len(profile["plugins"]) == scorers
        declared = {p["type"] for p in parsed["plugins"]}
        for scorer in profile["plugins"]:
            assert {f"SchedulingPlugin.{k}" for k in scorer} <= fields
            assert scorer["pluginRef"] in declared


def test_the_picker_config_carries_the_weights_of_the_spec() -> None:
    platform = _platform(picker="prefix_cache", weights={"prefix_cache": 5, "queue": 0})
    objects = render_platform(platform, CONTEXT)[NAME]
    config = _named("ConfigMap", names.picker_service_name(NAME), objects)
    (profile,) = yaml.safe_load(config["data"][routing.CONFIG_FILE])["schedulingProfiles"]
    weights = {p["pluginRef"]: p["weight"] for p in profile["plugins"]}
    assert weights == {"prefix-cache-scorer": 5, "kv-cache-utilization-scorer": 2}


def test_the_picker_flags_are_the_pinned_releases() -> None:
    flags = _table("flag")
    picker = _named("Deployment", names.picker_service_name(NAME))
    args = picker["spec"]["template"]["spec"]["containers"][0]["args"]
    given = {a[2:].split("=")[0] for a in args if a.startswith("--")}
    assert given
    assert given <= flags


def test_the_picker_reads_pods_and_pools_in_its_namespace_only() -> None:
    role = _named("Role", names.picker_service_name(NAME))
    assert role["metadata"]["namespace"] == names.INFERENCE_NAMESPACE
    rules = {
        f"{group}/{resource}:{','.join(rule['verbs'])}"
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert rules == {
        "/pods:get,watch,list",
        "inference.networking.k8s.io/inferencepools:get,watch,list",
    }
    assert rules <= _table("rbac")
    assert not of_kind(_objects(), "ClusterRole")
    binding = _named("RoleBinding", names.picker_service_name(NAME))
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    picker = _named("Deployment", names.picker_service_name(NAME))
    (subject,) = binding["subjects"]
    assert subject["name"] == picker["spec"]["template"]["spec"]["serviceAccountName"]


def _policy(name: str) -> dict[str, Any]:
    spec: dict[str, Any] = _named("NetworkPolicy", name)["spec"]
    return spec


def _peers_and_ports(rules: list[dict[str, Any]], direction: str) -> list[tuple[str, list[Any]]]:
    return [
        (json.dumps(rule[direction], sort_keys=True), sorted(str(p["port"]) for p in rule["ports"]))
        for rule in rules
    ]


def test_the_proxy_reaches_dns_the_picker_and_the_servers_and_nothing_else() -> None:
    proxy = _policy(f"{NAME}-proxy")
    assert proxy["podSelector"]["matchLabels"][COMPONENT_LABEL] == routing.PROXY
    egress = _peers_and_ports(proxy["egress"], "to")
    assert [ports for _, ports in egress] == [["53", "53"], ["9002"], ["8000"]]
    assert routing.PICKER in egress[1][0]
    assert "vllm" in egress[2][0]
    ingress = _peers_and_ports(proxy["ingress"], "from")
    assert ingress[0] == (json.dumps([{"ipBlock": {"cidr": CONTEXT.vpc_cidr}}]), ["19001", "8081"])
    assert ingress[1][1] == ["19001"]
    assert "prometheus" in ingress[1][0]
    # The deployment's common egress (HTTPS anywhere) leaves the proxy out.
    common = _policy(f"{NAME}-egress")["podSelector"]
    assert common["matchLabels"] == {INSTANCE_LABEL: NAME}
    assert common["matchExpressions"] == [
        {"key": COMPONENT_LABEL, "operator": "NotIn", "values": [routing.PROXY]}
    ]


def test_the_picker_accepts_the_proxy_and_prometheus_and_reaches_the_servers() -> None:
    picker = _policy(f"{NAME}-picker")
    ingress = _peers_and_ports(picker["ingress"], "from")
    assert [ports for _, ports in ingress] == [["9002"], ["9090"]]
    assert routing.PROXY in ingress[0][0]
    assert "prometheus" in ingress[1][0]
    (egress,) = _peers_and_ports(picker["egress"], "to")
    assert egress[1] == ["8000"]
    assert "vllm" in egress[0]


def test_round_robin_renders_what_no_routing_renders() -> None:
    plain = render_platform(_platform(), CONTEXT)[NAME]
    assert render_platform(_platform(picker="round_robin"), CONTEXT)[NAME] == plain
    assert not of_kind(plain, "InferencePool")
    assert all(names.PROXY_ROLE not in o["metadata"]["name"] for o in plain)


def test_the_picker_changes_nothing_of_the_servers() -> None:
    """The scorers chosen (approximate prefix, KV utilization, queue) read the servers'
    /metrics and the prompts the picker sees: no vLLM flag or variable is needed."""
    plain = _named("Deployment", NAME, render_platform(_platform(), CONTEXT)[NAME])
    assert _named("Deployment", NAME) == plain


def test_the_proxy_closes_idle_server_connections_before_the_servers_do() -> None:
    servers = _named("Deployment", NAME)
    (container,) = servers["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    keep_alive = int(env["VLLM_HTTP_TIMEOUT_KEEP_ALIVE"])
    clusters = _clusters(_proxy_config())
    for name in (routing_proxy.PICKED_CLUSTER, routing_proxy.FALLBACK_CLUSTER):
        options = clusters[name]["typed_extension_protocol_options"]
        (http,) = options.values()
        idle = int(http["common_http_protocol_options"]["idle_timeout"].removesuffix("s"))
        # Below the exposed servers' keep-alive, and below vLLM's default (5 s) when not exposed.
        assert idle < min(keep_alive, 5)


def test_the_proxy_serves_on_while_the_load_balancer_drains_it() -> None:
    annotations = _named("Ingress", NAME)["metadata"]["annotations"]
    attributes = dict(
        kv.split("=")
        for kv in annotations["alb.ingress.kubernetes.io/target-group-attributes"].split(",")
    )
    drain = int(attributes["deregistration_delay.timeout_seconds"])
    proxy = _named("Deployment", names.proxy_service_name(NAME))["spec"]["template"]["spec"]
    (container,) = proxy["containers"]
    assert container["lifecycle"]["preStop"]["sleep"]["seconds"] == drain
    assert proxy["terminationGracePeriodSeconds"] > drain
