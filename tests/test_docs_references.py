"""What the pages name in code spans exists: files, modules and the stack's outputs.

The strict site build checks links, anchors and the API reference's names; it cannot see a
file path, a module or an output named as code (`eks_inference/charts/pod.py`,
``python -m eks_inference.nodejs``). Those rot silently when the code moves, so each is
checked here against the checkout, the package's source and the synthesized reference app.
"""

from __future__ import annotations

import ast
import re
from fnmatch import fnmatchcase
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from eks_inference.charts.render import KARPENTER_FILE
from eks_inference.specification.platform import PlatformSpec
from eks_inference.specification.routes import base_url_outputs
from tests.helpers.platforms import EXAMPLES
from tests.helpers.synthesis import STACK_NAME, Synthesized

REPO = Path(__file__).resolve().parents[1]
PAGES = {
    path.relative_to(REPO).as_posix(): path.read_text(encoding="utf-8")
    for path in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
}
_CODE = re.compile(r"`([^`\n]+)`")
_PATH = re.compile(r"[\w.<>-]+(?:/[\w.<>-]+)*(?:/|\.(?:py|yaml|json|md|txt|toml|png))")
# The folders of the checkout a path may start from; a path starting elsewhere is relative to
# a folder the text names (`charts/chart.py`, `pod.py`) and must end some file's path.
ROOTS = ("eks_inference/", "tests/", "bench/", "examples/", "k8s_manifests/", "docs/")
# k8s_manifests/ holds the reference app's manifests in its file's mode (managed node groups);
# the writer also writes this file in Karpenter mode.
WRITTEN_IN_KARPENTER_MODE = f"k8s_manifests/{KARPENTER_FILE}"
# Placeholders in a path: `<name>`, and NN for a manifest's two-digit place in apply order.
_PLACEHOLDER = re.compile(r"<[^>]+>")
# Files of other projects the pages cite, each beside the project and version it is from.
UPSTREAM_FILES = {
    "compose.py",  # triton-inference-server/server, r25.11: how Triton builds its images
    "lmcache/observability.py",  # LMCache 0.5.6: where its metric names are defined
    # vLLM 0.34.0: where LoRA resolvers, the runtime adapter endpoints and the slots are made
    "vllm/entrypoints/serve/engine/serving.py",
    "vllm/entrypoints/openai/models/serving.py",
    "vllm/entrypoints/serve/lora/api_router.py",
    "vllm/lora/model_manager.py",
    "dynamo/prometheus_names.py",  # ai-dynamo 1.6.1: where its metric names are defined
    "dynamo/vllm/main.py",  # ai-dynamo 1.6.1: how the vLLM worker fetches a model that is not local
    # vLLM (a stored commit): the /metrics registry, multiprocess with PROMETHEUS_MULTIPROC_DIR
    "vllm/v1/metrics/prometheus.py",
    # ai-dynamo 1.6.1: the graphs the release generates itself
    "dynamo/profiler/templates/dgd/vllm/{agg,disagg}.yaml",
}
_DOTTED = re.compile(r"\beks_inference(?:\.\w+)+")
_OUTPUT_ID = re.compile(r"`(Endpoints[A-Za-z0-9]+)`")
_OUTPUT_DESCRIPTION = re.compile(r"`(OpenAI-compatible base URL of [^`]+)`")


def _code_spans() -> list[tuple[str, str]]:
    return [(page, span) for page, text in PAGES.items() for span in _CODE.findall(text)]


def _path_references() -> list[tuple[str, str]]:
    return sorted(
        {(page, span) for page, span in _code_spans() if _PATH.fullmatch(span) and "/" in span}
        | {(page, span) for page, span in _code_spans() if re.fullmatch(r"[\w/]+\.py", span)}
    )


@cache
def _checkout() -> tuple[str, ...]:
    """Every file and folder of the checkout (folders with a trailing ``/``), build products
    and installed dependencies left out."""
    skipped = {".git", ".venv", "node_modules", "site", "cdk.out", "__pycache__"}
    found = []
    for path in REPO.rglob("*"):
        relative = path.relative_to(REPO)
        if skipped.isdisjoint(relative.parts):
            found.append(relative.as_posix() + ("/" if path.is_dir() else ""))
    return tuple(found)


def _pattern(reference: str) -> str:
    return _PLACEHOLDER.sub("*", reference).replace("NN-", "[0-9][0-9]-")


def test_the_pages_name_paths() -> None:
    references = {span for _, span in _path_references()}
    assert "eks_inference/charts/pod.py" in references
    assert "pod.py" in references


@pytest.mark.parametrize(("page", "reference"), _path_references())
def test_every_path_a_page_names_exists(page: str, reference: str) -> None:
    if reference in UPSTREAM_FILES or reference == WRITTEN_IN_KARPENTER_MODE:
        return
    pattern = _pattern(reference)
    if reference.startswith(ROOTS):
        assert any(fnmatchcase(path, pattern) for path in _checkout()), (
            f"{page} names {reference}, which is not in the checkout"
        )
    elif not reference.endswith("/"):
        assert any(
            fnmatchcase(path, pattern) or fnmatchcase(path, f"*/{pattern}") for path in _checkout()
        ), f"{page} names {reference}, which ends no file's path in the checkout"


def _dotted_names() -> list[tuple[str, str]]:
    return sorted(
        {
            (page, name)
            for page, text in PAGES.items()
            for line in text.splitlines()
            if not line.startswith(":::")  # the site build resolves these
            for name in _DOTTED.findall(line)
        }
    )


def _module_file(module: str) -> Path | None:
    base = REPO / module.replace(".", "/")
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _top_level_names(source: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(source.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return names


def test_the_pages_name_modules() -> None:
    assert ("docs/constructs.md", "eks_inference.nodejs") in _dotted_names()


@pytest.mark.parametrize(("page", "name"), _dotted_names())
def test_every_module_and_name_a_page_names_exists(page: str, name: str) -> None:
    """``a.b.c`` is a module, or a name defined at the top of the longest module it starts
    with (read from the source: nothing is imported)."""
    parts = name.split(".")
    for split in range(len(parts), 0, -1):
        source = _module_file(".".join(parts[:split]))
        if source is not None:
            rest = parts[split:]
            assert not rest or rest[0] in _top_level_names(source), (
                f"{page} names {name}: {'.'.join(parts[:split])} defines no {rest[0]}"
            )
            return
    pytest.fail(f"{page} names {name}, which is no module of the package")


def _output_descriptions(platform: PlatformSpec) -> set[str]:
    return {output.description for output in base_url_outputs(platform.routes(), platform.splits())}


def test_the_base_url_outputs_the_pages_describe_are_the_stacks() -> None:
    described = {
        (page, text)
        for page, page_text in PAGES.items()
        for text in _OUTPUT_DESCRIPTION.findall(page_text)
    }
    assert {page for page, _ in described} >= {"docs/reaching-a-model.md", "docs/triton.md"}
    made = _output_descriptions(PlatformSpec.from_yaml(REPO / "deployments.yaml")).union(
        *(_output_descriptions(PlatformSpec.from_yaml(example)) for example in EXAMPLES)
    )
    unknown = sorted(described - {(page, text) for page, text in described if text in made})
    assert not unknown, f"outputs no platform of the repository makes: {unknown}"


@pytest.mark.synth
@pytest.mark.xdist_group("synth")
def test_the_output_ids_the_pages_name_are_the_reference_apps(reference: Synthesized) -> None:
    outputs: dict[str, Any] = reference.templates[STACK_NAME]["Outputs"]
    named = {
        (page, output_id) for page, text in PAGES.items() for output_id in _OUTPUT_ID.findall(text)
    }
    assert ("docs/reaching-a-model.md", "EndpointsApiKeyCommandE9BC16F1") in named
    unknown = sorted((page, output_id) for page, output_id in named if output_id not in outputs)
    assert not unknown, f"outputs the reference app does not make: {unknown}"
