"""The Envoy bootstrap of a routed deployment's proxy (:mod:`eks_inference.charts.routing`).

Read from the preset of llm-d-router v0.10.0's standalone chart
(``config/charts/llm-d-router-standalone/values.yaml``: ``proxy.presets.envoy``) and changed
in three ways, each for a reason of this platform: clients' destination headers are removed
before any filter reads them, a request the picker chose no endpoint for goes round robin to
the deployment's Service (``fail_open``) or is refused (``fail_closed``), and the picker is
reached over its Service (the chart's ``proxy.mode: service``).
"""

from __future__ import annotations

import json
from typing import Any

from eks_inference import names
from eks_inference.charts.model_server import OPENAI_PORT
from eks_inference.charts.pod import Json
from eks_inference.names import INFERENCE_NAMESPACE
from eks_inference.specification.deployment import ModelDeploymentSpec

# The EPP's ext_proc port at v0.10.0 (config/charts/routerlib/templates/_deployment.yaml).
EXT_PROC_PORT = 9002
# The proxy's listener, and its readiness and Prometheus listener (the chart's preset).
PROXY_PORT = 8081
PROXY_READY_PORT = 19001
PROXY_ADMIN_PORT = 19000
PROXY_READY_PATH = "/ready"
PROXY_METRICS_PATH = "/stats/prometheus"
PROXY_REPLICAS = 2
# The header the picker names its endpoint in, which the original-destination cluster reads.
DESTINATION_HEADER = "x-gateway-destination-endpoint"
FALLBACK_CLUSTER = names.FALLBACK_CLUSTER
PICKED_CLUSTER = names.PICKED_CLUSTER
PICKER_CLUSTER = "ext_proc"
PROXY_CONFIG_FILE = "envoy.yaml"
PROXY_CONFIG_DIR = "/etc/envoy"


def _socket(address: str, port: int) -> Json:
    return {"socket_address": {"address": address, "port_value": port}}


def _cluster(name: str, kind: str, address: str, port: int, **extra: Any) -> Json:
    return {
        "name": name,
        "type": kind,
        "connect_timeout": "5s",
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": _socket(address, port)}}]}],
        },
        **extra,
    }


def _typed(kind: str, **config: Any) -> Json:
    return {"@type": f"type.googleapis.com/{kind}", **config}


# Connections to the servers (HTTP/1.1) are closed after this long idle: before a server
# closes them itself, at its keep-alive (vLLM's default 5 s when not exposed, the load
# balancer's idle timeout and a margin when exposed), which would fail the request Envoy sent
# on a connection the server was closing.
SERVER_IDLE_TIMEOUT_S = 4
_SERVER_CONNECTIONS = {
    "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
        "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
        "common_http_protocol_options": {"idle_timeout": f"{SERVER_IDLE_TIMEOUT_S}s"},
        "explicit_http_config": {"http_protocol_options": {}},
    }
}
_HCM = "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
_ROUTER = _typed("envoy.extensions.filters.http.router.v3.Router", suppress_envoy_headers=True)


def proxy_config(spec: ModelDeploymentSpec) -> str:
    """The proxy's Envoy bootstrap (YAML is JSON): the chart's preset (v0.10.0,
    ``config/charts/llm-d-router-standalone/values.yaml``), with clients' destination headers
    removed, the round-robin fallback, and the picker reached over its Service."""
    routing = spec.routing
    assert routing is not None
    service_host = f"{{}}.{INFERENCE_NAMESPACE}.svc.cluster.local"
    no_pick: Json = (
        {"route": {"cluster": FALLBACK_CLUSTER, "timeout": "86400s", "idle_timeout": "86400s"}}
        if routing.failure_mode == "fail_open"
        else {"direct_response": {"status": 503, "body": {"inline_string": "no endpoint\n"}}}
    )
    ext_proc = _typed(
        "envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor",
        failure_mode_allow=routing.failure_mode == "fail_open",
        grpc_service={
            "envoy_grpc": {"cluster_name": PICKER_CLUSTER, "authority": "localhost:9002"},
            "timeout": "10s",
        },
        processing_mode={
            "request_header_mode": "SEND",
            "response_header_mode": "SEND",
            "request_body_mode": "FULL_DUPLEX_STREAMED",
            "response_body_mode": "FULL_DUPLEX_STREAMED",
            "request_trailer_mode": "SEND",
            "response_trailer_mode": "SEND",
        },
        message_timeout="1000s",
    )
    served = _typed(
        _HCM,
        stat_prefix="routed",
        # Before any filter: a client's own destination header would pick any address.
        early_header_mutation_extensions=[
            {
                "name": "envoy.http.early_header_mutation.header_mutation",
                "typed_config": _typed(
                    "envoy.extensions.http.early_header_mutation.header_mutation.v3.HeaderMutation",
                    mutations=[{"remove": DESTINATION_HEADER}],
                ),
            }
        ],
        route_config={
            "name": "routed",
            "virtual_hosts": [
                {
                    "name": "routed",
                    "domains": ["*"],
                    "routes": [
                        {
                            "match": {
                                "prefix": "/",
                                "headers": [{"name": DESTINATION_HEADER, "present_match": True}],
                            },
                            "route": {
                                "cluster": PICKED_CLUSTER,
                                "timeout": "86400s",
                                "idle_timeout": "86400s",
                            },
                        },
                        {"match": {"prefix": "/"}, **no_pick},
                    ],
                }
            ],
        },
        http_filters=[
            {"name": "envoy.filters.http.ext_proc", "typed_config": ext_proc},
            {"name": "envoy.filters.http.router", "typed_config": _ROUTER},
        ],
        use_remote_address=True,
        normalize_path=True,
        merge_slashes=True,
        common_http_protocol_options={"headers_with_underscores_action": "REJECT_REQUEST"},
        path_with_escaped_slashes_action="UNESCAPE_AND_REDIRECT",
    )
    ready = _typed(
        _HCM,
        stat_prefix="ready",
        route_config={
            "name": "ready",
            "virtual_hosts": [
                {
                    "name": "ready",
                    "domains": ["*"],
                    "routes": [
                        {
                            "match": {"path": PROXY_METRICS_PATH},
                            "route": {"cluster": "admin"},
                        }
                    ],
                }
            ],
        },
        http_filters=[
            {
                "name": "envoy.filters.http.health_check",
                "typed_config": _typed(
                    "envoy.extensions.filters.http.health_check.v3.HealthCheck",
                    pass_through_mode=False,
                    headers=[{"name": ":path", "string_match": {"exact": PROXY_READY_PATH}}],
                ),
            },
            {"name": "envoy.filters.http.router", "typed_config": _ROUTER},
        ],
    )
    http2 = {
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": _typed(
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
            explicit_http_config={"http2_protocol_options": {}},
        )
    }
    bootstrap = {
        "admin": {"address": _socket("127.0.0.1", PROXY_ADMIN_PORT)},
        "static_resources": {
            "listeners": [
                {
                    "name": "ready",
                    "address": _socket("0.0.0.0", PROXY_READY_PORT),
                    "filter_chains": [
                        {
                            "filters": [
                                {
                                    "name": "envoy.filters.network.http_connection_manager",
                                    "typed_config": ready,
                                }
                            ]
                        }
                    ],
                },
                {
                    "name": "routed",
                    "address": _socket("0.0.0.0", PROXY_PORT),
                    "per_connection_buffer_limit_bytes": 32768,
                    "filter_chains": [
                        {
                            "filters": [
                                {
                                    "name": "envoy.filters.network.http_connection_manager",
                                    "typed_config": served,
                                }
                            ]
                        }
                    ],
                },
            ],
            "clusters": [
                _cluster("admin", "STATIC", "127.0.0.1", PROXY_ADMIN_PORT),
                {
                    "name": PICKED_CLUSTER,
                    "type": "ORIGINAL_DST",
                    "connect_timeout": "1000s",
                    "lb_policy": "CLUSTER_PROVIDED",
                    "original_dst_lb_config": {
                        "use_http_header": True,
                        "http_header_name": DESTINATION_HEADER,
                    },
                    "typed_extension_protocol_options": _SERVER_CONNECTIONS,
                },
                _cluster(
                    FALLBACK_CLUSTER,
                    "STRICT_DNS",
                    service_host.format(spec.name),
                    OPENAI_PORT,
                    typed_extension_protocol_options=_SERVER_CONNECTIONS,
                ),
                _cluster(
                    PICKER_CLUSTER,
                    "STRICT_DNS",
                    service_host.format(names.picker_service_name(spec.name)),
                    EXT_PROC_PORT,
                    lb_policy="LEAST_REQUEST",
                    typed_extension_protocol_options=http2,
                    # The picker serves TLS with a certificate of its own making (secure
                    # serving, its default), which the chart's proxy does not verify either.
                    transport_socket={
                        "name": "envoy.transport_sockets.tls",
                        "typed_config": _typed(
                            "envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
                            common_tls_context={"alpn_protocols": ["h2"]},
                        ),
                    },
                    health_checks=[
                        {
                            "timeout": "2s",
                            "interval": "10s",
                            "unhealthy_threshold": 3,
                            "healthy_threshold": 2,
                            "reuse_connection": True,
                            "grpc_health_check": {
                                "service_name": "envoy.service.ext_proc.v3.ExternalProcessor"
                            },
                        }
                    ],
                ),
            ],
        },
    }
    return json.dumps(bootstrap, indent=2) + "\n"
