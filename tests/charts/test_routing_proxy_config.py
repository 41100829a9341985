"""The proxy's Envoy bootstrap parses as Envoy's own API: every field, every typed extension.

Envoy's API as protobuf messages (``xds-protos``, generated from envoyproxy/data-plane-api),
parsed strictly: an unknown or misspelt field, a wrong type, or a ``typed_config`` whose type
is not the message its fields belong to fails. The messages are a later data-plane-api than
the pinned Envoy 1.33.2's; every field the bootstrap uses is older than 1.33.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
from typing import Any

import pytest

from eks_inference.charts.routing_proxy import proxy_config
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.platforms import example

bootstrap_pb2 = pytest.importorskip(
    "envoy.config.bootstrap.v3.bootstrap_pb2", reason="xds-protos (requirements-dev.txt)"
)
json_format = pytest.importorskip("google.protobuf.json_format")
_TYPE_URL = re.compile(r"type\.googleapis\.com/([\w.]+)")


def _bootstrap(failure_mode: str) -> dict[str, Any]:
    data = example("prefix-routing")
    data["deployments"][0]["routing"] = {"picker": "prefix_cache", "failure_mode": failure_mode}
    (spec,) = PlatformSpec.model_validate(data).deployments
    parsed: dict[str, Any] = json.loads(proxy_config(spec))
    return parsed


def _load_types(text: str) -> set[str]:
    """Import the modules of every message a ``typed_config`` names, so that the parser
    resolves it; the names found."""
    envoy = importlib.import_module("envoy")
    modules = [m.name for m in pkgutil.walk_packages(envoy.__path__, "envoy.")]
    names = set(_TYPE_URL.findall(text))
    for name in names:
        package = name.rsplit(".", 1)[0]
        for module in modules:
            if module.startswith(f"{package}.") and module.endswith("_pb2"):
                importlib.import_module(module)
    return names


def _parse(config: dict[str, Any]) -> Any:
    message = bootstrap_pb2.Bootstrap()
    json_format.ParseDict(config, message)
    return message


@pytest.mark.parametrize("failure_mode", ["fail_open", "fail_closed"])
def test_the_bootstrap_is_envoys_api(failure_mode: str) -> None:
    config = _bootstrap(failure_mode)
    types = _load_types(json.dumps(config))
    assert "envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor" in types
    message = _parse(config)
    listeners = {listener.name for listener in message.static_resources.listeners}
    assert listeners == {"ready", "routed"}
    assert len(message.static_resources.clusters) == 4


def test_a_misspelt_field_is_refused() -> None:
    config = _bootstrap("fail_open")
    _load_types(json.dumps(config))
    config["static_resources"]["clusters"][0]["connect_timout"] = "5s"
    with pytest.raises(json_format.ParseError, match="connect_timout"):
        _parse(config)
