"""A deployment's monitoring rendered once per kind and renamed is, byte for byte, what rendering
it afresh gives: for every platform the tests hold to a reference, for deployments of every kind
copied under names hostile to renaming, and for renders that use the name other than by writing
it, which are never renamed."""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
from pydantic import BaseModel

from bench.platforms import generated_platform
from eks_inference.charts import monitoring
from eks_inference.charts.monitoring import ROLE, monitoring_chart, rendered_per_kind
from eks_inference.charts.renamed import SENTINEL, SHORT_NAME, RenamedKinds, kind_of
from eks_inference.charts.render import manifest_text, render_files
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.written_platforms import PLATFORMS, writer_context

Json = dict[str, Any]

# Names a renaming by text would get wrong: words of the objects' keys, label keys, metric
# names and PromQL, YAML 1.1 scalars, a name in the namespace's and the labels' names, names
# inside others and inside the instance types and model ids of the specs, the longest names
# (the dashboard uid cuts them), the renaming's own sentinel and short name.
HOSTILE_NAMES = (
    "inference",
    "inference-deployment",
    "monitoring",
    "dashboard",
    "json",
    "uid",
    "title",
    "expr",
    "alert",
    "labels",
    "severity",
    "warning",
    "ready",
    "waiting",
    "p95",
    "vllm",
    "ray",
    "app",
    "kubernetes",
    "io",
    "instance",
    "component",
    "part-of",
    "namespace",
    "deployment",
    "sum",
    "rate",
    "le",
    "pod",
    "node",
    "on",
    "off",
    "yes",
    "no",
    "true",
    "null",
    "grafana",
    "eksi",
    "m",
    "e",
    "a-b",
    "a-b-c",
    "b-c",
    "m0",
    "m000",
    "llama",
    "mistral",
    "models",
    "neuron",
    "g6e",
    "inf2",
    "x" * 40,
    "eksi-" + "y" * 35,
    "z" * 39,
    "z" * 37 + "-0",
    SENTINEL,
    SHORT_NAME,
)


def _renamed(value: Any, old: str, new: str) -> Any:
    """Plain data with ``old`` replaced by ``new`` in every string."""
    if isinstance(value, str):
        return value.replace(old, new)
    if isinstance(value, dict):
        return {_renamed(k, old, new): _renamed(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_renamed(item, old, new) for item in value]
    return value


def _fresh_text(spec: ModelDeploymentSpec) -> str:
    """The monitoring file of ``spec`` rendered on its own (outside a platform's render)."""
    return manifest_text(monitoring_chart(spec).objects)


def _monitoring_files(files: Mapping[str, str]) -> dict[str, str]:
    return {
        path.split("/")[0]: text for path, text in files.items() if path.endswith(f"-{ROLE}.yaml")
    }


def _hostile_generated(count: int) -> PlatformSpec:
    """The benchmarks' platform of ``count`` deployments (every kind in turn) named by
    :data:`HOSTILE_NAMES`, each weights prefix holding its deployment's name as there."""
    data = generated_platform(count).model_dump(mode="json")
    for deployment, name in zip(data["deployments"], HOSTILE_NAMES, strict=False):
        deployment["weights"]["prefix"] = f"models/{name}/"
        deployment["name"] = name
    return PlatformSpec.model_validate(data)


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names the monitoring objects are rendered for, from now on."""
    names: list[str] = []
    render = monitoring._monitoring_objects

    def counted(spec: ModelDeploymentSpec, derived: Mapping[str, str]) -> list[Json]:
        names.append(spec.name)
        return render(spec, derived)

    monkeypatch.setattr(monitoring, "_monitoring_objects", counted)
    return names


@pytest.mark.parametrize("name", sorted(PLATFORMS))
def test_every_platform_s_monitoring_files_are_each_deployment_s_own_render(name: str) -> None:
    platform = PLATFORMS[name]()
    written = _monitoring_files(render_files(platform, writer_context(platform)))
    assert set(written) == {spec.name for spec in platform.deployments}
    for spec in platform.deployments:
        assert written[spec.name] == _fresh_text(spec), spec.name


def test_hostile_names_render_their_monitoring_as_on_their_own() -> None:
    platform = _hostile_generated(len(HOSTILE_NAMES))
    written = _monitoring_files(render_files(platform, writer_context(platform)))
    assert sorted(written) == sorted(HOSTILE_NAMES)
    for spec in platform.deployments:
        assert written[spec.name] == _fresh_text(spec), spec.name


def test_the_benchmarks_100_deployments_render_their_monitoring_once_per_kind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rendered = _counting(monkeypatch)
    render_files(generated_platform(100))
    # Four kinds: each one's first deployment, its template and the check under the short name.
    assert len(rendered) == 4 * 3
    assert rendered.count(SENTINEL) == 4
    assert rendered.count(SHORT_NAME) == 4


def _kinds() -> dict[str, ModelDeploymentSpec]:
    """One deployment of every kind of every platform, by the platform and its name."""
    found: dict[str, ModelDeploymentSpec] = {}
    seen: set[str] = set()
    for name, make in sorted(PLATFORMS.items()):
        for spec in make().deployments:
            kind = repr(kind_of(spec))
            if kind not in seen:
                seen.add(kind)
                found[f"{name}/{spec.name}"] = spec
    return found


KINDS = _kinds()


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_renamed_under_hostile_names_is_its_own_render(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = KINDS[kind]
    data = spec.model_dump(mode="json", exclude_unset=True)
    copies = [spec]
    for name in HOSTILE_NAMES:
        renamed = _renamed(data, spec.name, name)
        copies.append(ModelDeploymentSpec.model_validate({**renamed, "name": name}))
    fresh = [_fresh_text(copy) for copy in copies]
    rendered = _counting(monkeypatch)
    with rendered_per_kind():
        texts = [manifest_text(monitoring_chart(copy).objects) for copy in copies]
    for copy, text, expected in zip(copies, texts, fresh, strict=True):
        assert text == expected, copy.name
    # Every kind of the platforms writes the name and nothing else of it: each kind among the
    # copies (a name inside a model id or an instance type makes a kind of its own) is
    # rendered for its first deployment, then, with a second, for its template and the check.
    members = Counter(repr(kind_of(copy)) for copy in copies)
    assert len(rendered) == sum(1 if count == 1 else 3 for count in members.values())


def _models(value: Any) -> Iterator[BaseModel]:
    """Every pydantic model in ``value``, itself included."""
    if isinstance(value, BaseModel):
        yield value
        for item in value.__dict__.values():
            yield from _models(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _models(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _models(item)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_kind_is_the_whole_spec(kind: str) -> None:
    """A kind is a spec's dump: no model in a spec of any kind leaves a field out of it or
    holds private state beside its fields."""
    models = list(_models(KINDS[kind]))
    assert models
    for model in models:
        excluded = [name for name, info in type(model).model_fields.items() if info.exclude]
        assert not excluded, (type(model).__name__, excluded)
        assert not model.__pydantic_private__, type(model).__name__


def _verbatim(spec: ModelDeploymentSpec, derived: Mapping[str, str]) -> list[Json]:
    labels = {"app.kubernetes.io/instance": spec.name, "uid": derived["uid"]}
    return [{"metadata": {"name": f"{spec.name}-x", "labels": labels}, "data": [spec.name, 1.5]}]


def _digest(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:8]


# Renders that use the name other than by writing it: renaming their template would be wrong.
NOT_VERBATIM: dict[str, Callable[[ModelDeploymentSpec, Mapping[str, str]], list[Json]]] = {
    "hash": lambda spec, derived: [{"name": spec.name, "digest": _digest(spec.name)}],
    "cut": lambda spec, derived: [{"name": f"{spec.name}-long-suffix"[:30]}],
    "length": lambda spec, derived: [{"name": spec.name, "size": len(spec.name)}],
    "upper": lambda spec, derived: [{"name": spec.name, "env": spec.name.upper()}],
    "escaped": lambda spec, derived: [{"pattern": re.escape(spec.name)}],
    "underscored": lambda spec, derived: [{"label": spec.name.replace("-", "_")}],
    "sorted": lambda spec, derived: [dict.fromkeys(sorted([spec.name, "middle"]), 1)],
    "short-form": lambda spec, derived: [{"name": spec.name if len(spec.name) > 12 else "short"}],
    "derived-cut": lambda spec, derived: [{"uid": derived["uid"][:20]}],
}
# Names none of which the specs of _spec hold elsewhere: one kind.
NAMES = ("alpha", "mid-name", "zeta-9", "qx", "inference-deployment", "q" * 40, "m0-x")


def _spec(name: str) -> ModelDeploymentSpec:
    return ModelDeploymentSpec.model_validate(
        {
            "name": name,
            "model": "mistral-7b",
            "instance_type": "g6e.2xlarge",
            "engine": "vllm",
            "weights": {"prefix": f"models/{name}/"},
        }
    )


def _uid(name: str) -> str:
    return f"uid-{_digest(name)}-{name}"


@pytest.mark.parametrize("render", sorted(NOT_VERBATIM))
def test_a_render_that_does_more_than_write_the_name_is_never_renamed(render: str) -> None:
    calls: list[str] = []

    def counted(spec: ModelDeploymentSpec, derived: Mapping[str, str]) -> list[Json]:
        calls.append(spec.name)
        return NOT_VERBATIM[render](spec, derived)

    kinds = RenamedKinds(counted, {"uid": _uid})
    specs = [_spec(name) for name in NAMES]
    got = [kinds.objects(spec) for spec in specs]
    assert got == [NOT_VERBATIM[render](spec, {"uid": _uid(spec.name)}) for spec in specs]
    # The template and the check were rendered, found wanting, and every deployment afresh.
    assert calls == [NAMES[0], SENTINEL, SHORT_NAME, *NAMES[1:]]


def test_a_render_that_writes_the_name_is_rendered_once_and_renamed() -> None:
    calls: list[str] = []

    def counted(spec: ModelDeploymentSpec, derived: Mapping[str, str]) -> list[Json]:
        calls.append(spec.name)
        return _verbatim(spec, derived)

    kinds = RenamedKinds(counted, {"uid": _uid})
    specs = [_spec(name) for name in NAMES]
    got = [kinds.objects(spec) for spec in specs]
    assert got == [_verbatim(spec, {"uid": _uid(spec.name)}) for spec in specs]
    assert calls == [NAMES[0], SENTINEL, SHORT_NAME]
    # New containers for every deployment: changing one's objects changes no other's.
    got[1][0]["metadata"]["labels"]["uid"] = "changed"
    assert kinds.objects(_spec("another"))[0]["metadata"]["labels"]["uid"] == _uid("another")


def test_a_spec_holding_the_sentinel_has_no_kind() -> None:
    spec = _spec("held").model_copy(
        update={"weights": _spec("held").weights.model_copy(update={"prefix": f"{SENTINEL}/"})}
    )
    assert kind_of(spec) is None
    assert kind_of(_spec("held")) == kind_of(_spec("other"))
