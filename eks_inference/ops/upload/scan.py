"""Reading the directory to upload: every entry accounted for before anything is sent.

An entry that cannot be read or uploaded (an unreadable directory, a dangling link, a link out
of the directory or into one of its parents, a FIFO or device, a name that cannot be an S3
key) stops the run with nothing sent; links that stay inside the directory are followed.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from eks_inference.ops.errors import BadInput
from eks_inference.ops.s3uri import S3Prefix
from eks_inference.ops.text import plural
from eks_inference.ops.upload import MAX_LISTED
from eks_inference.ops.upload.files import FileIdentity, ScannedFile
from eks_inference.ops.upload.lease import LOCK_SUFFIX
from eks_inference.ops.upload.manifest import Kind, bookkeeping_names
from eks_inference.specification.adapters import ADAPTER_CONFIG_NAME
from eks_inference.specification.aws_types import key_characters_problem

# S3's longest key, in UTF-8 bytes.
MAX_KEY_BYTES = 1024
_WEIGHT_SUFFIXES = (".safetensors", ".bin")


@dataclass(frozen=True)
class ScannedDirectory:
    """The files to upload sorted by key, and the links followed."""

    files: list[ScannedFile]
    total_bytes: int
    links: list[str]
    """One note per symbolic link followed: its key, what it points to and what is uploaded."""


@dataclass
class _Walk:
    root: Path
    files: list[ScannedFile] = field(default_factory=list)
    total_bytes: int = 0
    links: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    outside_links: bool = False


def _reason(error: BaseException) -> str:
    return str(getattr(error, "strerror", None) or error)


def _name_problem(name: str) -> str | None:
    """Why a file or directory name cannot be part of an S3 key, or None.

    Only the characters refused in every key: IAM's pattern characters are refused in the
    prefix that is granted, not in the names below it.
    """
    try:
        name.encode()
    except UnicodeEncodeError:
        return "has a name that is not valid UTF-8, which S3 keys must be; rename it"
    if key_characters_problem(name) is not None:
        return "has a control character, '?', '#' or '\\' in its name, refused in keys; rename it"
    return None


def _walk_entry(walk: _Walk, entry: os.DirEntry[str], relative: str) -> os.stat_result | None:
    """The entry's status, following a link that stays inside the directory; None if refused."""
    path = Path(entry.path)
    try:
        if entry.is_symlink():
            target = os.readlink(path)
            try:
                real = path.resolve(strict=True)
            except FileNotFoundError:
                walk.problems.append(f"{relative!r} is a link to {target!r}, which does not exist")
                return None
            if not real.is_relative_to(walk.root):
                walk.problems.append(f"{relative!r} is a link to {target!r}, outside the directory")
                walk.outside_links = True
                return None
            walk.links.append(
                f"{relative!r} is a link to {target!r} inside the directory: what it points "
                "to is uploaded under the link's name"
            )
        return path.stat()
    except (OSError, RuntimeError) as error:
        # RuntimeError: a link loop, as Path.resolve reports it before Python 3.13.
        walk.problems.append(f"{relative!r} cannot be read ({_reason(error)})")
        return None


def _walk(local_dir: Path) -> _Walk:
    """Every entry below ``local_dir`` except hidden ones, each a file, a link or a problem.

    ``os.walk`` would skip a directory it cannot list and a linked directory without a word;
    here each one is accounted for.
    """
    walk = _Walk(root=local_dir.resolve())
    # (directory, its key prefix, the real paths of it and its parents: a link to one of them
    # would never end)
    pending: list[tuple[Path, str, frozenset[Path]]] = [(local_dir, "", frozenset({walk.root}))]
    while pending:
        directory, base, parents = pending.pop()
        try:
            with os.scandir(directory) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError as error:
            walk.problems.append(f"{base or './'!r} cannot be read ({_reason(error)})")
            continue
        for entry in entries:
            if entry.name.startswith("."):
                continue
            relative = base + entry.name
            problem = _name_problem(entry.name)
            if problem is not None:
                walk.problems.append(f"{relative!r} {problem}")
                continue
            status = _walk_entry(walk, entry, relative)
            if status is None:
                continue
            if stat.S_ISDIR(status.st_mode):
                real = Path(entry.path).resolve()
                if real in parents:
                    walk.problems.append(f"{relative!r} is a link to one of its own parents")
                    continue
                pending.append((Path(entry.path), relative + "/", parents | {real}))
            elif stat.S_ISREG(status.st_mode) and entry.name.endswith(LOCK_SUFFIX):
                walk.problems.append(
                    f"{relative!r} ends in {LOCK_SUFFIX}, the name of the upload's lease "
                    "lock objects; rename it"
                )
            elif stat.S_ISREG(status.st_mode):
                path = Path(entry.path)
                source = path.resolve() if entry.is_symlink() else path
                walk.files.append(ScannedFile(relative, path, source, FileIdentity.of(status)))
                walk.total_bytes += status.st_size
            else:
                walk.problems.append(
                    f"{relative!r} is not a file or directory (a FIFO, socket or device)"
                )
    walk.files.sort(key=lambda f: f.relative)
    return walk


def scan_directory(local_dir: Path, kind: Kind) -> ScannedDirectory:
    """The files to upload, after checking that the directory can be uploaded as a whole.

    Hidden files and directories (``.cache/`` left by Hugging Face downloads, ``.DS_Store``)
    are not part of a model and are skipped. Anything else that cannot be read or uploaded
    fails here, naming every such entry, so that no upload, deletion or manifest ever rests on
    a partial listing. Weights must look like a Hugging Face model directory, and an adapter
    like a PEFT adapter directory (``adapter_config.json`` and its weights), so that a wrong
    path fails here instead of in a pod minutes after start.
    """
    if not local_dir.is_dir():
        raise BadInput(f"{local_dir} is not a directory")
    walk = _walk(local_dir)
    if walk.problems:
        listed = "; ".join(walk.problems[:MAX_LISTED])
        more = len(walk.problems) - MAX_LISTED
        hint = (
            " (copy link targets into the directory, e.g. with cp -rL)"
            if walk.outside_links
            else ""
        )
        raise BadInput(
            f"cannot upload {local_dir} as it is, nothing was sent; "
            f"{plural(len(walk.problems), 'problem')}: {listed}"
            f"{f' (+{more} more)' if more > 0 else ''}{hint}"
        )
    found = walk.files
    top_level = {f.relative for f in found if "/" not in f.relative}
    for name in bookkeeping_names(kind):
        if name in top_level:
            raise BadInput(f"{local_dir / name} would collide with the upload's own {name}")
    if kind == "weights":
        if "config.json" not in top_level:
            raise BadInput(f"{local_dir} does not look like a model: no config.json in it")
        if not any(name.endswith(_WEIGHT_SUFFIXES) for name in top_level):
            raise BadInput(
                f"{local_dir} does not look like a model: no *.safetensors or *.bin weights in it"
            )
    elif kind == "adapter":
        if ADAPTER_CONFIG_NAME not in top_level:
            raise BadInput(
                f"{local_dir} does not look like a LoRA adapter: no {ADAPTER_CONFIG_NAME} in it "
                "(save it with PEFT's save_pretrained)"
            )
        if not any(name.endswith(_WEIGHT_SUFFIXES) for name in top_level):
            raise BadInput(
                f"{local_dir} does not look like a LoRA adapter: no *.safetensors or *.bin "
                "weights in it"
            )
    elif not found:
        raise BadInput(f"{local_dir} is empty; nothing to upload as artifacts")
    return ScannedDirectory(files=found, total_bytes=walk.total_bytes, links=walk.links)


def check_keys(target: S3Prefix, relatives: Iterable[str]) -> None:
    """Every file's key under ``target`` must fit S3's key length, or nothing is uploaded."""
    too_long = [r for r in relatives if len(target.key(r).encode()) > MAX_KEY_BYTES]
    if too_long:
        raise BadInput(
            f"{plural(len(too_long), 'key')} under {target} would be longer than S3's "
            f"{MAX_KEY_BYTES} bytes, e.g. {too_long[0]!r}; use a shorter prefix or shorter names"
        )
