"""The manifest writer: layout, determinism, atomic replacement, speed, and apply order."""

from __future__ import annotations

import time
from pathlib import Path

import cdk8s
import pytest
import yaml

from eks_inference.charts import DeploymentChart, NamespaceChart, deployment_charts, render
from eks_inference.charts.render import (
    default_context,
    render_files,
    render_platform,
    write_manifests,
)
from eks_inference.platform import PlatformSpec
from eks_inference.serve.image import asset_image_uri
from tests.charts.conftest import CONTEXT, Rendered


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_layout_one_folder_per_deployment_one_file_per_chart(reference: Rendered) -> None:
    assert sorted(reference.files) == [
        "api-key.yaml",
        "exporters.yaml",
        "llama3-8b-inf2/01-model-weights.yaml",
        "llama3-8b-inf2/02-neuron-artifacts.yaml",
        "llama3-8b-inf2/03-rayservice.yaml",
        "llama3-8b-inf2/04-compile-job.yaml",
        "llama3-8b-inf2/05-monitoring.yaml",
        "llama3-8b-inf2/06-endpoint.yaml",
        "mistral-7b-g6e/01-vllm.yaml",
        "mistral-7b-g6e/02-monitoring.yaml",
        "mistral-7b-g6e/03-endpoint.yaml",
        "namespace.yaml",
        "qwen25-7b-g6e/01-model-weights.yaml",
        "qwen25-7b-g6e/02-rayservice.yaml",
        "qwen25-7b-g6e/03-monitoring.yaml",
        "qwen25-7b-g6e/04-endpoint.yaml",
    ]


def test_files_hold_the_rendered_objects_in_apply_order(reference: Rendered) -> None:
    for name, objects in reference.objects.items():
        from_files = [
            document
            for path in sorted(p for p in reference.files if p.startswith(f"{name}/"))
            for document in yaml.safe_load_all(reference.files[path])
        ]
        assert from_files == objects
        kinds = [o["kind"] for o in objects]
        server = next(i for i, k in enumerate(kinds) if k in {"Deployment", "RayService"})
        assert all(i < server for i, k in enumerate(kinds) if k.startswith("Persistent"))


def test_multiline_strings_are_literal_blocks(reference: Rendered) -> None:
    text = reference.files["llama3-8b-inf2/03-rayservice.yaml"]
    assert "serveConfigV2: |" in text
    assert "neuron_app.py: |" in text
    assert "&id" not in text


def test_write_is_deterministic(tmp_path: Path, reference_platform: PlatformSpec) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    write_manifests(reference_platform, first, CONTEXT)
    write_manifests(reference_platform, second, CONTEXT)
    assert _tree(first) == _tree(second)
    assert set(_tree(first)) == set(render_files(reference_platform, CONTEXT))


def test_write_replaces_manifests_and_keeps_other_files(
    tmp_path: Path, reference_platform: PlatformSpec
) -> None:
    """Folders of retired deployments and stale manifests go; PLAN.md (written by `plan`) stays."""
    out = tmp_path / "k8s_manifests"
    (out / "retired-deployment").mkdir(parents=True)
    (out / "retired-deployment" / "01-vllm.yaml").write_text("stale")
    (out / "retired.yaml").write_text("stale")
    (out / "PLAN.md").write_text("# Capacity and cost plan\n")
    written = write_manifests(reference_platform, out, CONTEXT)
    assert not (out / "retired-deployment").exists()
    assert not (out / "retired.yaml").exists()
    assert (out / "PLAN.md").read_text() == "# Capacity and cost plan\n"
    assert sorted(written) == sorted(p for p in out.rglob("*.yaml"))
    assert [p.name for p in tmp_path.iterdir()] == ["k8s_manifests"]


def test_failure_while_rendering_keeps_the_previous_output(
    tmp_path: Path, reference_platform: PlatformSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "k8s_manifests"
    write_manifests(reference_platform, out, CONTEXT)
    before = _tree(out)
    rendered = []

    def fail_on_second(*args: object, **kwargs: object) -> list[cdk8s.Chart]:
        rendered.append(args)
        if len(rendered) == 2:
            raise RuntimeError("render failed")
        return deployment_charts(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(render, "deployment_charts", fail_on_second)
    with pytest.raises(RuntimeError, match="render failed"):
        write_manifests(reference_platform, out, CONTEXT)
    assert _tree(out) == before
    assert [p.name for p in tmp_path.iterdir()] == ["k8s_manifests"]


def test_failure_while_writing_keeps_the_previous_output(
    tmp_path: Path, reference_platform: PlatformSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "k8s_manifests"
    write_manifests(reference_platform, out, CONTEXT)
    before = _tree(out)
    original = Path.write_text
    calls = []

    def fail_on_third(self: Path, *args: object, **kwargs: object) -> int:
        calls.append(self)
        if len(calls) == 3:
            raise OSError("disk full")
        return original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "write_text", fail_on_third)
    with pytest.raises(OSError, match="disk full"):
        write_manifests(reference_platform, out, CONTEXT)
    assert _tree(out) == before
    assert [p.name for p in tmp_path.iterdir()] == ["k8s_manifests"]


def test_first_write_creates_the_directory(
    tmp_path: Path, reference_platform: PlatformSpec
) -> None:
    out = tmp_path / "new" / "k8s_manifests"
    write_manifests(reference_platform, out, CONTEXT)
    assert (out / "namespace.yaml").is_file()
    assert oct(out.stat().st_mode & 0o777) == oct(0o755)


def test_rendering_the_reference_platform_is_fast(reference_platform: PlatformSpec) -> None:
    render_files(reference_platform, CONTEXT)  # warm the JavaScript runtime
    start = time.perf_counter()
    render_files(reference_platform, CONTEXT)
    assert time.perf_counter() - start < 0.5


def test_server_chart_depends_on_its_volumes(reference_platform: PlatformSpec) -> None:
    app = cdk8s.App()
    NamespaceChart(app)
    for spec in reference_platform.deployments:
        charts = deployment_charts(app, spec, reference_platform.placement(spec), CONTEXT)
        assert all(isinstance(c, DeploymentChart) for c in charts)
        *volumes, server = charts
        dependencies = set(server.node.dependencies)
        assert dependencies == set(volumes)
        assert [c.node.id for c in charts] == [f"{spec.name}-{c.role}" for c in charts]  # type: ignore[attr-defined]


def test_render_platform_maps_deployments_to_objects(reference: Rendered) -> None:
    assert list(reference.objects) == [d.name for d in reference.platform.deployments]
    assert render_platform(reference.platform, CONTEXT) == reference.objects


def test_default_context_names_the_cdk_built_image(reference_platform: PlatformSpec) -> None:
    context = default_context(reference_platform)
    assert context.bucket_name == reference_platform.model_bucket_name
    assert context.region == reference_platform.region
    assert context.neuron_ray_image == asset_image_uri(
        reference_platform.account_id, reference_platform.region
    )
    text = render_files(reference_platform)["llama3-8b-inf2/03-rayservice.yaml"]
    assert f"image: {context.neuron_ray_image}" in text
