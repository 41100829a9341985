"""The manifest writer against a hand-edited marker, a link into ``.git`` and a second run
writing to the same directory: each refused in one line, with nothing in the directory
changed."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from eks_inference.output.directory import MARKER, OutputDirError, replace_owned_files
from eks_inference.output.writer import FILE_HEADER as HEADER
from tests.helpers.rendered import Rendered


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


@pytest.mark.parametrize("entry", [".git/config", ".git", "README.md", "apps/notes.txt"])
def test_a_marker_listing_a_file_the_writer_never_writes_removes_nothing(
    tmp_path: Path, reference: Rendered, entry: str
) -> None:
    """The writer writes only ``.yaml`` files outside hidden folders: a marker listing a
    repository's ``.git`` or a user's file was edited, and trusting it would delete them."""
    out = tmp_path / "out"
    replace_owned_files(out, reference.files, HEADER)
    (out / entry).parent.mkdir(parents=True, exist_ok=True)
    (out / entry).write_text("mine\n")
    with (out / MARKER).open("a") as marker:
        marker.write(f"{entry}\n")
    before = _tree(out)
    with pytest.raises(OutputDirError, match="is not a file of the manifest writer's layout"):
        replace_owned_files(out, reference.files, HEADER, allow_other_files=True)
    assert _tree(out) == before


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"namespace.yaml\n# caf\xe9\n", "not UTF-8 text"),
        (b"namespace.yaml\n" + b"#" * (2 * 1024 * 1024) + b"\n", "larger than 1024 KiB"),
    ],
)
def test_a_marker_the_writer_cannot_have_written_is_refused_in_one_line(
    tmp_path: Path, reference: Rendered, content: bytes, reason: str
) -> None:
    out = tmp_path / "out"
    replace_owned_files(out, reference.files, HEADER)
    (out / MARKER).write_bytes(content)
    before = _tree(out)
    with pytest.raises(OutputDirError, match=reason) as raised:
        replace_owned_files(out, reference.files, HEADER)
    assert len(str(raised.value).splitlines()) == 1
    assert _tree(out) == before


def test_a_folder_reached_through_a_link_into_a_git_directory_is_refused(
    tmp_path: Path, reference: Rendered
) -> None:
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    (tmp_path / "git-dir").symlink_to(tmp_path / "repo" / ".git", target_is_directory=True)
    with pytest.raises(OutputDirError, match=r"inside a \.git directory"):
        replace_owned_files(tmp_path / "git-dir" / "manifests", reference.files, HEADER)
    assert list((tmp_path / "repo" / ".git").iterdir()) == []


def test_a_second_run_into_a_directory_being_written_is_refused_and_changes_nothing(
    tmp_path: Path, reference: Rendered, variants: Rendered
) -> None:
    """Two runs at once would remove each other's staging folders and leave half of each."""
    out = tmp_path / "out"
    replace_owned_files(out, variants.files, HEADER)
    before = _tree(out)
    descriptor = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        with pytest.raises(OutputDirError, match="another `eks-inference manifests` run"):
            replace_owned_files(out, reference.files, HEADER)
        assert _tree(out) == before
    finally:
        os.close(descriptor)
    replace_owned_files(out, reference.files, HEADER)
    assert set(_tree(out)) == {*reference.files, MARKER}
