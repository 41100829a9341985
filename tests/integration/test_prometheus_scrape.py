"""A real Prometheus scrapes a fake vLLM /metrics on 127.0.0.1 with the scrape configuration
our PodMonitor describes, and the query KEDA scales on returns what the fake exports.

Kubernetes service discovery is replaced by a static target carrying the discovery labels the
rendered pod would have (its labels as ``__meta_kubernetes_pod_label_*``, its namespace), so
the PodMonitor's path and relabelings run unchanged inside Prometheus. The scrape interval is
shortened to one second to keep the test within seconds; the fake listens on a free port
rather than the pod's 8000, whose name the monitor must resolve (checked below too).
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.objects import of_kind, one
from tests.helpers.observed import autoscaled_objects, pods, sanitized, selects

PROMETHEUS = shutil.which("prometheus")
pytestmark = pytest.mark.skipif(
    PROMETHEUS is None,
    reason="prometheus not installed (Debian: apt-get install -y prometheus)",
)
DEPLOYMENT = "mistral-auto"
# Two engines of the deployment: 3 + 4 requests waiting, KV caches at 50 % and 70 %.
EXPOSITION = """\
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="mistralai/Mistral-7B-Instruct-v0.1"} 3.0
vllm:num_requests_waiting{engine="1",model_name="mistralai/Mistral-7B-Instruct-v0.1"} 4.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="mistralai/Mistral-7B-Instruct-v0.1"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="mistralai/Mistral-7B-Instruct-v0.1"} 0.7
"""
_DEADLINE_S = 45


class _FakeVllm(BaseHTTPRequestHandler):
    path_served = "/metrics"

    def do_GET(self) -> None:
        if self.path != self.path_served:
            self.send_error(404)
            return
        body = EXPOSITION.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the test reads Prometheus, not the fake's access log."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def fake_vllm() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeVllm)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def _relabel_config(relabeling: dict[str, Any]) -> dict[str, Any]:
    """A PodMonitor relabeling (camelCase) as Prometheus configuration (snake_case)."""
    keys = {"sourceLabels": "source_labels", "targetLabel": "target_label"}
    return {keys.get(k, k): (v.lower() if k == "action" else v) for k, v in relabeling.items()}


def scrape_config(
    monitor: dict[str, Any], target: str, pod_labels: dict[str, str]
) -> dict[str, Any]:
    """The scrape job the Prometheus Operator generates from ``monitor``, discovery replaced."""
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    discovered = {f"__meta_kubernetes_pod_label_{sanitized(k)}": v for k, v in pod_labels.items()}
    discovered["__meta_kubernetes_namespace"] = monitor["metadata"]["namespace"]
    return {
        "job_name": monitor["metadata"]["name"],
        "metrics_path": endpoint["path"],
        "scrape_interval": "1s",
        "static_configs": [{"targets": [target], "labels": discovered}],
        "relabel_configs": [_relabel_config(r) for r in endpoint["relabelings"]],
    }


def _query(base: str, expr: str) -> list[dict[str, Any]]:
    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    with urllib.request.urlopen(url, timeout=5) as response:
        body = json.load(response)
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def _wait_for(base: str, expr: str, process: subprocess.Popen[bytes]) -> float:
    deadline = time.monotonic() + _DEADLINE_S
    while time.monotonic() < deadline:
        assert process.poll() is None, "prometheus exited"
        try:
            result = _query(base, expr)
        except OSError:
            result = []
        if result:
            (sample,) = result
            return float(sample["value"][1])
        time.sleep(0.5)
    raise AssertionError(f"no value for {expr} within {_DEADLINE_S} s")


@pytest.mark.long
def test_prometheus_scrapes_with_our_monitor_and_keda_reads_the_queue(
    fake_vllm: int, tmp_path: Path
) -> None:
    objects = autoscaled_objects()[DEPLOYMENT]
    (monitor,) = of_kind(objects, "PodMonitor")
    (pod,) = [p for p in pods(objects) if selects(monitor["spec"]["selector"], p.labels)]
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert pod.port_number(endpoint["port"]) == 8000
    triggers = {t["name"]: t for t in one(objects, "ScaledObject")["spec"]["triggers"]}

    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [scrape_config(monitor, f"127.0.0.1:{fake_vllm}", dict(pod.labels))],
    }
    config_file = tmp_path / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(config))
    assert PROMETHEUS is not None
    web = f"127.0.0.1:{_free_port()}"
    process = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config_file}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address={web}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        base = f"http://{web}"
        # Both engines scraped, and labelled with the deployment from the pod's labels.
        selected = f'vllm:num_requests_waiting{{inference_deployment="{DEPLOYMENT}"}}'
        assert _wait_for(base, f"count({selected})", process) == 2.0
        (series,) = _query(base, f"count by (inference_deployment, namespace) ({selected})")
        assert series["metric"] == {"inference_deployment": DEPLOYMENT}
        waiting = _wait_for(base, triggers["queue-depth"]["metadata"]["query"], process)
        assert waiting == 7.0
        kv = _wait_for(base, triggers["kv-cache"]["metadata"]["query"], process)
        assert kv == pytest.approx(0.6)
    finally:
        process.terminate()
        process.wait(timeout=30)
