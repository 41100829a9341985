"""The manifests directory: which files in it the writer owns, and replacing exactly those.

The writer owns only what it wrote. It lists those files in a marker file (:data:`MARKER`) in
the directory, and on the next run replaces exactly them: files it listed but no longer
renders are removed (and folders they leave empty), everything else is left alone. A
directory that holds anything else (a ``.git``, a user's ``apps/``, a symbolic link, a stale
file without the writer's header) is refused unless the caller allows other files; even then
they are never touched, and a file the writer would write over is refused. The output
directory itself must be a real directory (not a symbolic link) and not inside a ``.git``.

Before the marker existed, the writer kept no list. A directory without a marker is taken
as the writer's when each of its files is one the writer writes: a ``.yaml`` file at the top or
one folder down (its layout) that starts with the writer's header line. This is how the
committed ``k8s_manifests/`` of an earlier version is adopted on the first run, renamed or
retired charts included, without asking for consent.

Companion files (:data:`COMPANION_FILES`) are written into the directory by other commands by
convention (``make synth`` writes the capacity plan ``PLAN.md`` there): they are not foreign,
and not the writer's either, so they are kept as they are.

Replacement is all or nothing for every error Python sees (a full disk, a busy or read-only
file, a missing permission): the new files are written to a staging folder inside the
directory first (inside rather than beside it, so that every move is a rename within one file
system even when the directory is a mount point), then each old file is moved aside and each
new one moved in (a folder the directory does not have yet comes in whole, in one move), every
step recorded; on an error the steps are undone in reverse order and the directory is as it
was. A process killed midway leaves a marker that lists the old and new files together and
hidden folders named after the marker, which the next run removes. One run writes to a
directory at a time: it holds a lock on the directory, and a second run is refused until the
first has finished.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

# Lists, one per line, the files the writer wrote into the directory.
MARKER = ".eks-inference-manifests"
# Hidden folders of a run in progress (staging, old files moved aside) start with this.
_RUN_PREFIX = f"{MARKER}."
_MARKER_HEADER = (
    "# Files `eks-inference manifests` wrote here; it replaces exactly these on its next run\n"
    "# and leaves every other file alone.\n"
)
# Written into the directory by other commands by convention (`make synth`): kept as they are.
COMPANION_FILES = frozenset({"PLAN.md"})
# The writer's layout: a file at the top of the directory or in one folder below it.
_MAX_DEPTH = 2
# Foreign files named in an error, before counting the rest.
_LISTED_FOREIGN = 3
# Every file the writer writes is YAML.
_SUFFIX = ".yaml"
# The marker lists some 60 bytes a file; a platform within CloudFormation's limits renders a
# few thousand files. A marker larger than this was not written by the writer.
_MAX_MARKER_BYTES = 1024 * 1024


class OutputDirError(ValueError):
    """The output directory cannot be written safely; the message says why and what to do."""


class ForeignFilesError(OutputDirError):
    """The output directory holds files the writer did not write (listed in ``foreign``)."""

    def __init__(self, message: str, foreign: tuple[str, ...]) -> None:
        super().__init__(message)
        self.foreign = foreign


@dataclass
class _Survey:
    """What the output directory holds, as paths relative to it: the writer's files and the
    folders they are in, foreign files, and the hidden folders of an interrupted run."""

    owned: set[str] = field(default_factory=set)
    folders: set[str] = field(default_factory=set)
    foreign: list[str] = field(default_factory=list)
    leftovers: list[str] = field(default_factory=list)


def replace_owned_files(
    out_dir: Path, files: Mapping[str, str], header: str, *, allow_other_files: bool = False
) -> list[Path]:
    """Make ``out_dir`` hold ``files`` (relative path -> text) in place of the writer's old ones.

    ``header`` is the first line of every file the writer writes (how an unmarked directory of
    an earlier version is recognised). Raises :class:`ForeignFilesError` when ``out_dir`` holds
    files the writer did not write, unless ``allow_other_files``; :class:`OutputDirError` when
    it cannot be written without touching something not the writer's; ``OSError`` when writing
    fails, with ``out_dir`` unchanged.
    """
    for relative in files:
        _check_relative(relative, "manifest path")
    # Refusals come before anything is created.
    _checked_survey(out_dir, files, header, allow_other_files)
    try:
        out_dir.mkdir(parents=True)
    except FileExistsError:
        created = False
    else:
        created = True
        # The manifests are not secret; a restrictive umask should not hide them from reviewers.
        out_dir.chmod(0o755)
    with _exclusive(out_dir):
        # Surveyed again under the lock: another run may have replaced the files meanwhile.
        survey = _checked_survey(out_dir, files, header, allow_other_files)
        try:
            _swap(out_dir, files, survey)
        except BaseException:
            if created:
                shutil.rmtree(out_dir, ignore_errors=True)
            raise
        for leftover in survey.leftovers:
            shutil.rmtree(out_dir / leftover, ignore_errors=True)
    return [out_dir / relative for relative in files]


def _checked_survey(
    out_dir: Path, files: Mapping[str, str], header: str, allow_other_files: bool
) -> _Survey:
    """The survey of ``out_dir``, refusing foreign files (unless allowed) and files in the way."""
    survey = _survey(out_dir, header)
    if survey.foreign and not allow_other_files:
        listed = ", ".join(survey.foreign[:_LISTED_FOREIGN])
        more = len(survey.foreign) - _LISTED_FOREIGN
        raise ForeignFilesError(
            f"{out_dir} holds files the manifest writer did not write ({listed}"
            f"{f' and {more} more' if more > 0 else ''}); choose a new or empty directory",
            tuple(survey.foreign),
        )
    _check_in_the_way(out_dir, files, survey.owned)
    return survey


@contextlib.contextmanager
def _exclusive(out_dir: Path) -> Iterator[None]:
    """Hold the writer's lock on ``out_dir``; refuse when another run holds it.

    Two runs into one directory would each take the other's staging folder for the leftover
    of a killed run and remove it, or move files the other already moved. The lock is the
    operating system's on the directory itself, released when the process ends however it
    ends, so a killed run never leaves the directory locked.
    """
    descriptor = os.open(out_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OutputDirError(
                f"another `eks-inference manifests` run is writing to {out_dir}; run again once "
                "it has finished"
            ) from None
        yield
    finally:
        os.close(descriptor)


def _check_relative(relative: str, what: str) -> None:
    """A path of the writer's layout: a relative ``.yaml`` file at most one folder deep, with
    no hidden part (``..``, ``.git``, the marker's own).

    The writer writes nothing else, so a marker listing anything else (``.git/config``, a
    user's ``README.md``) was edited by hand and would make the writer delete that file.
    """
    parts = relative.split("/")
    if (
        len(parts) > _MAX_DEPTH
        or relative.startswith("/")
        or "\\" in relative
        or not relative.endswith(_SUFFIX)
        or any(part == "" or part.startswith(".") for part in parts)
    ):
        raise OutputDirError(f"{what} {relative!r} is not a file of the manifest writer's layout")


def _survey(out_dir: Path, header: str) -> _Survey:
    """Sort what ``out_dir`` holds into the writer's files, foreign ones and leftovers."""
    survey = _Survey()
    # Resolved too: a folder reached through a link to a repository's .git is inside it.
    resolved = Path(os.path.realpath(out_dir))
    if any(part == ".git" for path in (out_dir.absolute(), resolved) for part in path.parts):
        raise OutputDirError(f"{out_dir} is inside a .git directory; write the manifests elsewhere")
    try:
        mode = os.lstat(out_dir).st_mode
    except FileNotFoundError:
        return survey
    if stat.S_ISLNK(mode):
        raise OutputDirError(
            f"{out_dir} is a symbolic link; give the directory it points to, "
            f"{os.path.realpath(out_dir)}"
        )
    if not stat.S_ISDIR(mode):
        raise OutputDirError(f"{out_dir} exists and is not a directory")
    listed = _read_marker(out_dir)

    def claims(relative: str, path: Path) -> bool:
        if listed is not None:
            return relative in listed
        return relative.endswith(_SUFFIX) and _starts_with(path, header)

    for entry in sorted(os.scandir(out_dir), key=lambda e: e.name):
        if entry.name == MARKER:
            continue
        if entry.name.startswith(_RUN_PREFIX) and entry.is_dir(follow_symlinks=False):
            survey.leftovers.append(entry.name)
        elif entry.name in COMPANION_FILES and entry.is_file(follow_symlinks=False):
            continue
        elif entry.is_dir(follow_symlinks=False):
            owned, foreign = [], []
            for item in sorted(os.scandir(entry.path), key=lambda e: e.name):
                relative = f"{entry.name}/{item.name}"
                if item.is_file(follow_symlinks=False) and claims(relative, Path(item.path)):
                    owned.append(relative)
                else:
                    foreign.append(relative)
            survey.owned.update(owned)
            # A folder the marker lists files in is the writer's even when a run killed before
            # it removed the folder left it empty.
            if owned or (
                not foreign
                and listed is not None
                and any(path.startswith(f"{entry.name}/") for path in listed)
            ):
                survey.folders.add(entry.name)
            # A folder holding nothing of the writer's is named once, not file by file.
            if foreign:
                survey.foreign.extend(foreign if owned else [f"{entry.name}/"])
            elif entry.name not in survey.folders:
                survey.foreign.append(f"{entry.name}/")
        elif entry.is_file(follow_symlinks=False) and claims(entry.name, Path(entry.path)):
            survey.owned.add(entry.name)
        else:
            survey.foreign.append(entry.name)
    return survey


def _read_marker(out_dir: Path) -> set[str] | None:
    """The files the marker lists, or ``None`` without a marker (an earlier version's output)."""
    marker = out_dir / MARKER
    try:
        mode = os.lstat(marker).st_mode
    except FileNotFoundError:
        return None
    not_written = f"{marker} is not a file the manifest writer wrote"
    if not stat.S_ISREG(mode):
        raise OutputDirError(f"{not_written}; remove it")
    with marker.open("rb") as handle:
        data = handle.read(_MAX_MARKER_BYTES + 1)
    if len(data) > _MAX_MARKER_BYTES:
        raise OutputDirError(
            f"{not_written} (larger than {_MAX_MARKER_BYTES // 1024} KiB); remove it"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise OutputDirError(f"{not_written} (not UTF-8 text); remove it") from None
    listed = set()
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            _check_relative(line, f"{marker} lists")
            listed.add(line)
    return listed


def _starts_with(path: Path, header: str) -> bool:
    expected = header.encode("utf-8")
    with path.open("rb") as handle:
        return handle.read(len(expected)) == expected


def _check_in_the_way(out_dir: Path, files: Mapping[str, str], owned: set[str]) -> None:
    """Refuse a new file whose path is taken by something that is not the writer's."""
    # Each folder is looked at once: what is in a missing one cannot be in the way.
    missing: set[str] = set()
    folders: set[str] = set()
    for relative in files:
        parts = relative.split("/")
        for depth in range(1, len(parts) + 1):
            partial = "/".join(parts[:depth])
            if partial in missing:
                break
            is_file = depth == len(parts)
            if not is_file and partial in folders:
                continue
            path = os.path.join(out_dir, partial)
            try:
                mode = os.lstat(path).st_mode
            except FileNotFoundError:
                missing.add(partial)
                break
            if is_file and not (stat.S_ISREG(mode) and partial in owned):
                raise OutputDirError(
                    f"{path} is in the way of a manifest and was not written by the manifest "
                    "writer; move it away"
                )
            if not is_file:
                if not stat.S_ISDIR(mode):
                    raise OutputDirError(
                        f"{path} is in the way of the manifest folder {partial}/ (it is not a "
                        "directory); move it away"
                    )
                folders.add(partial)


class _Steps:
    """Renames made so far, undone in reverse order when a later step fails."""

    def __init__(self) -> None:
        self._done: list[tuple[str, str]] = []

    def move(self, source: str, target: str) -> None:
        os.rename(source, target)
        self._done.append((source, target))

    def undo(self) -> None:
        for source, target in reversed(self._done):
            os.rename(target, source)


# Opening as text mode's "w" does, without its translation of line ends on Windows.
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_BINARY", 0)


def _write_text(path: str, text: str) -> None:
    """``text`` as the file ``path``: the bytes text mode writes (UTF-8, line feeds as the
    platform's line ends), with a system call each to open, write and close and no buffered
    text layer between, for the few hundred files of a platform written whole."""
    if os.linesep != "\n":
        text = text.replace("\n", os.linesep)
    data = memoryview(text.encode("utf-8"))
    descriptor = os.open(path, _WRITE_FLAGS, 0o666)
    try:
        while data:
            data = data[os.write(descriptor, data) :]
    finally:
        os.close(descriptor)


def _swap(out_dir: Path, files: Mapping[str, str], survey: _Survey) -> None:
    """Stage ``files`` in ``out_dir``, then move the old owned files aside and the new in."""
    # Plain string paths: a few thousand files make pathlib's parsing a measurable share.
    out = str(out_dir)
    staging = tempfile.mkdtemp(prefix=f"{_RUN_PREFIX}new-", dir=out)
    aside = tempfile.mkdtemp(prefix=f"{_RUN_PREFIX}old-", dir=out)
    steps = _Steps()
    try:
        # The layout is at most one folder deep: a file's folder is its path's first part.
        needed = {relative.partition("/")[0] for relative in files if "/" in relative}
        # Each folder once, not once per file: a system call each.
        for folder in needed:
            os.mkdir(os.path.join(staging, folder))
        for relative, text in files.items():
            _write_text(os.path.join(staging, relative), text)
        marker = os.path.join(out, MARKER)
        final_marker = os.path.join(staging, MARKER)
        interim_marker = f"{final_marker}.interim"
        _write_text(final_marker, _marker_text(files))
        _write_text(interim_marker, _marker_text([*files, *survey.owned]))
        if os.path.lexists(marker):
            steps.move(marker, os.path.join(aside, MARKER))
        # Until the last step the marker lists old and new files, so that a run killed midway
        # leaves a directory the next run still recognises as the writer's.
        steps.move(interim_marker, marker)
        for relative in sorted(survey.owned):
            os.makedirs(os.path.dirname(os.path.join(aside, relative)), exist_ok=True)
            steps.move(os.path.join(out, relative), os.path.join(aside, relative))
        for folder in sorted(survey.folders - needed):
            if not any(os.scandir(os.path.join(out, folder))):
                steps.move(os.path.join(out, folder), os.path.join(aside, f"{folder}.folder"))
        # A folder the directory does not have comes in whole, one rename for all its files.
        arriving = {folder for folder in needed if not os.path.lexists(os.path.join(out, folder))}
        for folder in sorted(arriving):
            steps.move(os.path.join(staging, folder), os.path.join(out, folder))
        for relative in files:
            if relative.partition("/")[0] not in arriving:
                steps.move(os.path.join(staging, relative), os.path.join(out, relative))
        steps.move(marker, os.path.join(aside, f"{MARKER}.interim"))
        steps.move(final_marker, marker)
    except BaseException:
        steps.undo()
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(aside, ignore_errors=True)


def _marker_text(files: Iterable[str]) -> str:
    return _MARKER_HEADER + "".join(f"{path}\n" for path in sorted(set(files)))
