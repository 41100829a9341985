"""The manifest writer: layout, determinism, owning only its files, all-or-nothing replacement,
speed, and apply order."""

from __future__ import annotations

import errno
import os
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from eks_inference.charts import render
from eks_inference.charts.deployment import RenderedDeployment, deployment_charts
from eks_inference.charts.render import default_context, render_files, render_platform
from eks_inference.cli.manifests import write
from eks_inference.output import directory as output_dir
from eks_inference.output.directory import (
    MARKER,
    ForeignFilesError,
    OutputDirError,
    replace_owned_files,
)
from eks_inference.output.writer import FILE_HEADER as HEADER
from eks_inference.output.writer import write_manifests
from eks_inference.output.yaml_dump import dump_yaml
from eks_inference.serve.image import asset_image_uri
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.platforms import REFERENCE_PLATFORM, REPO
from tests.helpers.rendered import CONTEXT, Rendered


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def _entries(root: Path) -> set[str]:
    """Every file, folder and link under ``root``, hidden ones included."""
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _entries_of(files: Mapping[str, str]) -> set[str]:
    return {*files, *(name.split("/")[0] for name in files if "/" in name)}


def test_layout_one_folder_per_deployment_one_file_per_chart(reference: Rendered) -> None:
    assert sorted(reference.files) == [
        "api-key.yaml",
        "exporters.yaml",
        "llama3-8b-inf2/01-network-policy.yaml",
        "llama3-8b-inf2/02-model-weights.yaml",
        "llama3-8b-inf2/03-neuron-artifacts.yaml",
        "llama3-8b-inf2/04-rayservice.yaml",
        "llama3-8b-inf2/05-compile-job.yaml",
        "llama3-8b-inf2/06-monitoring.yaml",
        "llama3-8b-inf2/07-endpoint.yaml",
        "mistral-7b-g6e/01-network-policy.yaml",
        "mistral-7b-g6e/02-vllm.yaml",
        "mistral-7b-g6e/03-monitoring.yaml",
        "mistral-7b-g6e/04-endpoint.yaml",
        "namespace.yaml",
        "qwen25-7b-g6e/01-network-policy.yaml",
        "qwen25-7b-g6e/02-model-weights.yaml",
        "qwen25-7b-g6e/03-rayservice.yaml",
        "qwen25-7b-g6e/04-monitoring.yaml",
        "qwen25-7b-g6e/05-endpoint.yaml",
    ]


def test_files_hold_the_rendered_objects_in_apply_order(reference: Rendered) -> None:
    volumes = 0
    for name, objects in reference.objects.items():
        from_files = [
            document
            for path in sorted(p for p in reference.files if p.startswith(f"{name}/"))
            for document in yaml.safe_load_all(reference.files[path])
        ]
        assert from_files == objects
        kinds = [o["kind"] for o in objects]
        server = next(i for i, k in enumerate(kinds) if k in {"Deployment", "RayService"})
        persistent = [i for i, k in enumerate(kinds) if k.startswith("Persistent")]
        assert all(i < server for i in persistent)
        volumes += len(persistent)
    assert volumes


def test_multiline_strings_are_literal_blocks(reference: Rendered) -> None:
    text = reference.files["llama3-8b-inf2/04-rayservice.yaml"]
    assert "serveConfigV2: |" in text
    assert "neuron.app.py: |" in text
    assert "&id" not in text


def test_write_is_deterministic(tmp_path: Path, reference_platform: PlatformSpec) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    write_manifests(render_files(reference_platform, CONTEXT), first)
    write_manifests(render_files(reference_platform, CONTEXT), second)
    assert _tree(first) == _tree(second)
    assert set(_tree(first)) == {*render_files(reference_platform, CONTEXT), MARKER}


def test_the_marker_lists_exactly_the_files_written(
    tmp_path: Path, reference_platform: PlatformSpec
) -> None:
    written = write_manifests(render_files(reference_platform, CONTEXT), tmp_path / "out")
    lines = (tmp_path / "out" / MARKER).read_text().splitlines()
    listed = [line for line in lines if not line.startswith("#")]
    assert listed == sorted(str(p.relative_to(tmp_path / "out")) for p in written)


def test_write_replaces_its_own_files_and_keeps_the_plan(
    tmp_path: Path, reference: Rendered, variants: Rendered
) -> None:
    """Folders of retired deployments and stale manifests go; PLAN.md (written by `plan`) stays."""
    out = tmp_path / "k8s_manifests"
    replace_owned_files(out, variants.files, HEADER)
    (out / "PLAN.md").write_text("# Capacity and cost plan\n")
    written = replace_owned_files(out, reference.files, HEADER)
    assert _tree(out) == {
        **{name: text.encode() for name, text in reference.files.items()},
        MARKER: (out / MARKER).read_bytes(),
        "PLAN.md": b"# Capacity and cost plan\n",
    }
    assert _entries(out) == _entries_of(reference.files) | {MARKER, "PLAN.md"}
    assert sorted(written) == sorted(out / name for name in reference.files)
    assert [p.name for p in tmp_path.iterdir()] == ["k8s_manifests"]


def test_a_directory_holding_files_it_did_not_write_is_refused_untouched(
    tmp_path: Path, reference: Rendered
) -> None:
    """`git init r; mkdir r/apps; manifests --out r` used to delete both."""
    out = tmp_path / "repo"
    (out / ".git").mkdir(parents=True)
    (out / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (out / "apps").mkdir()
    before, entries = _tree(out), _entries(out)
    with pytest.raises(ForeignFilesError, match=r"did not write \(\.git/, apps/\)") as raised:
        replace_owned_files(out, reference.files, HEADER)
    assert raised.value.foreign == (".git/", "apps/")
    assert (_tree(out), _entries(out)) == (before, entries)


def test_files_it_did_not_write_are_never_touched_when_allowed(
    tmp_path: Path, reference: Rendered, variants: Rendered
) -> None:
    out = tmp_path / "repo"
    (out / ".git").mkdir(parents=True)
    (out / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (out / "apps").mkdir()
    (out / "README.md").write_text("mine\n")
    replace_owned_files(out, variants.files, HEADER, allow_other_files=True)
    # A file of the user's inside a folder the writer made keeps that folder alive.
    user_file = out / "qwen-gpu-tp4" / "notes.txt"
    user_file.write_text("mine too\n")
    replace_owned_files(out, reference.files, HEADER, allow_other_files=True)
    assert _entries(out) == _entries_of(reference.files) | {
        MARKER,
        ".git",
        ".git/HEAD",
        "apps",
        "README.md",
        "qwen-gpu-tp4",
        "qwen-gpu-tp4/notes.txt",
    }
    assert (out / ".git" / "HEAD").read_text() == "ref: refs/heads/main\n"
    assert user_file.read_text() == "mine too\n"


@pytest.mark.parametrize("allow_other_files", [False, True])
def test_a_file_it_would_write_over_is_refused_even_when_others_are_allowed(
    tmp_path: Path, reference: Rendered, allow_other_files: bool
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "namespace.yaml").write_text("# my own namespace\n")
    with pytest.raises(OutputDirError, match=r"namespace\.yaml"):
        replace_owned_files(out, reference.files, HEADER, allow_other_files=allow_other_files)
    assert _tree(out) == {"namespace.yaml": b"# my own namespace\n"}


def test_symbolic_links_are_refused_as_the_directory_and_never_followed_inside(
    tmp_path: Path, reference: Rendered
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = tmp_path / "link"
    link.symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(OutputDirError, match="is a symbolic link"):
        replace_owned_files(link, reference.files, HEADER)
    out = tmp_path / "out"
    replace_owned_files(out, reference.files, HEADER)
    shutil.rmtree(out / "mistral-7b-g6e")
    (out / "mistral-7b-g6e").symlink_to(elsewhere, target_is_directory=True)
    before = _tree(out)
    with pytest.raises(OutputDirError, match="mistral-7b-g6e"):
        replace_owned_files(out, reference.files, HEADER, allow_other_files=True)
    assert list(elsewhere.iterdir()) == []
    assert _tree(out) == before


def test_a_regular_file_or_a_folder_in_a_git_directory_is_refused(
    tmp_path: Path, reference: Rendered
) -> None:
    regular = tmp_path / "file"
    regular.write_text("not a directory\n")
    with pytest.raises(OutputDirError, match="is not a directory"):
        replace_owned_files(regular, reference.files, HEADER)
    assert regular.read_text() == "not a directory\n"
    with pytest.raises(OutputDirError, match=r"inside a \.git directory"):
        replace_owned_files(tmp_path / ".git" / "manifests", reference.files, HEADER)
    assert not (tmp_path / ".git").exists()


@pytest.mark.parametrize(
    "entry", ["../outside.yaml", "/etc/passwd", "a/b/c.yaml", ".", "apps//x.yaml", "./x.yaml"]
)
def test_a_marker_naming_paths_outside_the_layout_is_refused(
    tmp_path: Path, reference: Rendered, entry: str
) -> None:
    out = tmp_path / "out"
    replace_owned_files(out, reference.files, HEADER)
    (out / MARKER).write_text(f"{entry}\n")
    before = _tree(out)
    with pytest.raises(OutputDirError, match="is not a file of the manifest writer's layout"):
        replace_owned_files(out, reference.files, HEADER, allow_other_files=True)
    assert _tree(out) == before


def test_an_unmarked_directory_of_an_earlier_version_is_adopted(
    tmp_path: Path, reference: Rendered
) -> None:
    """The layout before the marker: the writer's header on every file, PLAN.md beside them."""
    out = tmp_path / "k8s_manifests"
    for name, text in {**reference.files, "retired/01-vllm.yaml": HEADER + "kind: Pod\n"}.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text)
    (out / "PLAN.md").write_text("# plan\n")
    replace_owned_files(out, reference.files, HEADER)
    assert _entries(out) == _entries_of(reference.files) | {MARKER, "PLAN.md"}


def test_the_committed_manifests_directory_is_adopted_without_consent(
    tmp_path: Path, reference: Rendered
) -> None:
    """What `make synth` does to k8s_manifests/ as committed, with or without a marker."""
    committed = tmp_path / "k8s_manifests"
    shutil.copytree(REPO / "k8s_manifests", committed, symlinks=True)
    replace_owned_files(committed, reference.files, HEADER)
    assert (committed / "PLAN.md").read_bytes() == (REPO / "k8s_manifests" / "PLAN.md").read_bytes()
    assert _entries(committed) == _entries_of(reference.files) | {MARKER, "PLAN.md"}


def test_an_unmarked_file_without_the_header_is_not_adopted(
    tmp_path: Path, reference: Rendered
) -> None:
    out = tmp_path / "k8s_manifests"
    (out / "retired").mkdir(parents=True)
    (out / "retired" / "01-vllm.yaml").write_text("kind: Pod\n")
    with pytest.raises(ForeignFilesError, match=r"retired/\)"):
        replace_owned_files(out, reference.files, HEADER)
    assert _tree(out) == {"retired/01-vllm.yaml": b"kind: Pod\n"}


def _previous_output(out: Path, variants: Rendered) -> tuple[dict[str, bytes], set[str]]:
    """An output of another platform beside a plan and a user's file; its bytes and entries."""
    replace_owned_files(out, variants.files, HEADER)
    (out / "PLAN.md").write_text("# plan\n")
    (out / "notes.txt").write_text("mine\n")
    return _tree(out), _entries(out)


def _raising_at_call(real: Callable[..., Any], at: int, error: BaseException) -> Callable[..., Any]:
    """``real``, except that its ``at``-th call raises ``error`` instead."""
    calls = 0

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == at:
            raise error
        return real(*args, **kwargs)

    return wrapper


@pytest.mark.parametrize(
    ("code", "previous_platform"),
    [
        (errno.EBUSY, "variants"),
        (errno.EACCES, "variants"),
        (errno.EXDEV, "variants"),
        (errno.EBUSY, "reference"),
    ],
)
def test_a_failed_rename_at_any_step_leaves_the_previous_output_byte_for_byte(
    tmp_path: Path,
    reference: Rendered,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    code: int,
    previous_platform: str,
) -> None:
    """Over another platform's output every deployment folder arrives whole; over the same
    platform's, each file is moved into the folder already there."""
    previous: Rendered = request.getfixturevalue(previous_platform)
    real_rename = os.rename
    renames = 0

    def counting(source: Any, target: Any) -> None:
        nonlocal renames
        renames += 1
        real_rename(source, target)

    monkeypatch.setattr(os, "rename", counting)
    before = _previous_output(tmp_path / "count", previous)
    renames = 0
    replace_owned_files(tmp_path / "count", reference.files, HEADER, allow_other_files=True)
    steps = renames
    # File by file: the markers' four moves, each old file aside and each new one in. A folder
    # the directory lacks arrives in one rename.
    file_by_file = 4 + len(previous.files) + len(reference.files)
    assert (steps < file_by_file) == (previous is not reference), (steps, file_by_file)
    for failing in range(1, steps + 1):
        out = tmp_path / f"fail-{failing}"
        assert _previous_output(out, previous) == before
        error = OSError(code, os.strerror(code))
        monkeypatch.setattr(os, "rename", _raising_at_call(real_rename, failing, error))
        with pytest.raises(OSError, match=os.strerror(code)):
            replace_owned_files(out, reference.files, HEADER, allow_other_files=True)
        monkeypatch.setattr(os, "rename", counting)
        assert (_tree(out), _entries(out)) == before, f"rename {failing} of {steps}"


def test_a_full_disk_at_any_file_leaves_the_previous_output_byte_for_byte(
    tmp_path: Path, reference: Rendered, variants: Rendered, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = output_dir._write_text
    writes = len(reference.files) + 2  # the files, then the marker and its interim version
    for failing in range(1, writes + 1):
        out = tmp_path / f"fail-{failing}"
        before = _previous_output(out, variants)
        full_disk = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        monkeypatch.setattr(
            output_dir, "_write_text", _raising_at_call(real_write, failing, full_disk)
        )
        with pytest.raises(OSError, match=os.strerror(errno.ENOSPC)):
            replace_owned_files(out, reference.files, HEADER, allow_other_files=True)
        monkeypatch.setattr(output_dir, "_write_text", real_write)
        assert (_tree(out), _entries(out)) == before, f"write {failing} of {writes}"


def test_a_run_killed_midway_is_finished_by_the_next(
    tmp_path: Path, reference: Rendered, variants: Rendered, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No undo, no clean-up (as after SIGKILL): the next run still owns its files."""
    real_rename = os.rename
    for killed_at in (3, len(variants.files) + 5, 2 * len(reference.files) + 2):
        out = tmp_path / f"killed-{killed_at}"
        _previous_output(out, variants)
        with monkeypatch.context() as patched:
            patched.setattr(
                os, "rename", _raising_at_call(real_rename, killed_at, KeyboardInterrupt())
            )
            patched.setattr(output_dir._Steps, "undo", lambda self: None)
            patched.setattr(output_dir.shutil, "rmtree", lambda *args, **kwargs: None)
            with pytest.raises(KeyboardInterrupt):
                replace_owned_files(out, reference.files, HEADER, allow_other_files=True)
        assert any(p.name.startswith(f"{MARKER}.") for p in out.iterdir())
        replace_owned_files(out, reference.files, HEADER, allow_other_files=True)
        assert _entries(out) == _entries_of(reference.files) | {MARKER, "PLAN.md", "notes.txt"}


def test_failure_while_rendering_keeps_the_previous_output(
    tmp_path: Path, reference_platform: PlatformSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "k8s_manifests"
    write(reference_platform, REFERENCE_PLATFORM, out, allow_other_files=False)
    before = _tree(out)
    rendered = []

    def fail_on_second(*args: object, **kwargs: object) -> RenderedDeployment:
        rendered.append(args)
        if len(rendered) == 2:
            raise RuntimeError("render failed")
        return deployment_charts(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(render, "deployment_charts", fail_on_second)
    with pytest.raises(RuntimeError, match="render failed"):
        write(reference_platform, REFERENCE_PLATFORM, out, allow_other_files=False)
    assert _tree(out) == before
    assert [p.name for p in tmp_path.iterdir()] == ["k8s_manifests"]


def test_a_failed_first_write_leaves_no_directory(
    tmp_path: Path, reference: Rendered, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full_disk(path: str, text: str) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)

    monkeypatch.setattr(output_dir, "_write_text", full_disk)
    with pytest.raises(OSError, match=os.strerror(errno.ENOSPC)):
        replace_owned_files(tmp_path / "new", reference.files, HEADER)
    assert list(tmp_path.iterdir()) == []


def test_first_write_creates_the_directory(
    tmp_path: Path, reference_platform: PlatformSpec
) -> None:
    out = tmp_path / "new" / "k8s_manifests"
    write_manifests(render_files(reference_platform, CONTEXT), out)
    assert (out / "namespace.yaml").is_file()
    assert oct(out.stat().st_mode & 0o777) == oct(0o755)


def test_rendering_the_reference_platform_is_fast(reference_platform: PlatformSpec) -> None:
    render_files(reference_platform, CONTEXT)  # warm the caches
    start = time.perf_counter()
    render_files(reference_platform, CONTEXT)
    assert time.perf_counter() - start < 0.5


def test_server_chart_comes_after_its_policies_and_volumes(
    reference_platform: PlatformSpec,
) -> None:
    for spec in reference_platform.deployments:
        charts = deployment_charts(spec, reference_platform.placement(spec), CONTEXT).charts
        *before, server = charts
        assert server.after == tuple(c.chart_id for c in before)
        assert all(c.after == () for c in before)
        assert [c.chart_id for c in charts] == [f"{spec.name}-{c.role}" for c in charts]
        assert {c.deployment_name for c in charts} == {spec.name}


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
    text = render_files(reference_platform)["llama3-8b-inf2/04-rayservice.yaml"]
    assert f"image: {context.neuron_ray_image}" in text


class _GenericDumper(yaml.CSafeDumper):
    """The writer's YAML as PyYAML's generic representer and resolver write it."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


_GenericDumper.add_representer(
    str,
    lambda dumper, value: dumper.represent_scalar(
        "tag:yaml.org,2002:str", value, style="|" if "\n" in value else None
    ),
)

# Scalars YAML reads as something else unless quoted, and text that needs escaping or folding.
_TRICKY = st.sampled_from(
    [
        "",
        "yes",
        "No",
        "on",
        "null",
        "~",
        "1",
        "0755",
        "1.5",
        ".inf",
        "1e3",
        "0x1F",
        "- a",
        "a: b",
        "#c",
        " lead",
        "trail ",
        "multi\nline\n",
        "tab\tin",
        "'q'",
        '"q"',
        "é ünï",
        "x" * 150,
        "word " * 40,
        "2026-01-01",
        "=",
        "<<",
        "*a",
        "&a",
        "!tag",
        "%",
        "@",
        "`",
    ]
)
_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(), _TRICKY)
_JSON = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.one_of(st.text(max_size=8), _TRICKY), inner, max_size=4)
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_JSON, min_size=1, max_size=3))
def test_yaml_is_what_the_generic_representer_writes(documents: list[Any]) -> None:
    """The writer (straight from the data, or libyaml's from nodes it builds itself) writes
    byte for byte the generic representer's text, for any JSON-like documents."""
    expected = yaml.dump_all(
        documents, Dumper=_GenericDumper, sort_keys=False, default_flow_style=False, width=100
    )
    assert dump_yaml(documents) == expected
