"""Read a YAML spec file safely: bounded in size, depth and expansion, without duplicate keys.

A spec file is data a person wrote, or a file someone handed over. Plain ``yaml.safe_load``
accepts a repeated key and keeps the last (a second ``deployments: []`` silently drops every
deployment), expands aliases without bound (a few KB that render gigabytes), recurses once per
level of nesting (a traceback), and converts integers of any length. :func:`load` rejects all
of these with a :class:`SpecFileError` naming the file and line, in time and memory bounded by
:data:`MAX_FILE_BYTES`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

# CloudFormation's limits stop a platform at about 300 deployments (README, "Performance and
# scale"), some 150 KB of YAML at 500 bytes each; the reference file is 2 KB. Reading stops
# here, so a wrong path (a model file, /dev/zero) fails at once, and the worst file accepted
# (half a megabyte of tiny nodes) parses in under three seconds and 150 MB.
MAX_FILE_BYTES = 512 * 1024
# Collections nested in one another: a platform file's deepest is the sixth (the file,
# deployments, a deployment, neuron, overrides, on_device_sampling_config); twenty leave room
# and keep every recursive walk of the data (the composer, pydantic, JSON) far from Python's
# recursion limit.
MAX_DEPTH = 20
# What the file expands to once aliases are resolved, measured as the characters of every
# scalar plus one per node. Without aliases a file measures at most about one and a half times
# its bytes; aliases may repeat content up to this much, but not multiply it (nine nested
# aliases of ten items each are a thousand million nodes).
MAX_EXPANDED_SIZE = 2 * MAX_FILE_BYTES
# Spec integers count cores, tokens, replicas, bytes or GiB: 64 bits hold them all, as they
# hold every integer of the Kubernetes and CloudFormation documents rendered from them.
MAX_INTEGER = 2**63 - 1
# Longer than any way of writing a 64-bit integer in YAML, so that a scalar of thousands of
# digits is refused before it is converted (Python refuses to convert more than 4,300 digits,
# with a ValueError that would surface as a traceback).
_MAX_INTEGER_CHARACTERS = 100

_INT_TAG = "tag:yaml.org,2002:int"
_MERGE_TAG = "tag:yaml.org,2002:merge"

# libyaml's parser when PyYAML was built with it (fast, and not recursive), else PyYAML's own.
try:
    from yaml import CSafeLoader as _BaseLoader
except ImportError:
    from yaml import SafeLoader as _BaseLoader  # type: ignore[assignment]


class SpecFileError(ValueError):
    """A spec file that cannot be read as data: too large, not UTF-8, not YAML, or over a limit.

    ``str()`` is one line: ``<path>, line <n>: <reason>`` (without the line where none
    applies).
    """

    def __init__(self, path: Path, reason: str, line: int | None = None) -> None:
        where = f"{path}, line {line}" if line is not None else str(path)
        super().__init__(f"{where}: {reason}")
        self.path = path
        self.reason = reason
        self.line = line


class _Mark(Protocol):
    """Where the parser is: PyYAML's and libyaml's marks alike (0-based line)."""

    line: int


class _LimitError(Exception):
    """A limit broken while parsing, at a 1-based line; :func:`load` adds the path."""

    def __init__(self, mark: _Mark | None, reason: str) -> None:
        super().__init__(reason)
        self.line = None if mark is None else mark.line + 1
        self.reason = reason


class _SpecLoader(_BaseLoader):
    """The safe loader, refusing duplicate keys and integers beyond 64 bits."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        # Checked before the merge keys (<<) are flattened in: a key given explicitly may
        # override a merged one, which is what merging is for.
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                continue
            key = self.construct_object(key_node)
            if key in seen:
                raise _LimitError(
                    key_node.start_mark,
                    f"duplicate key {key_node.value!r} (first at line {seen[key]}); YAML would "
                    "keep only the last, silently",
                )
            seen[key] = key_node.start_mark.line + 1
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping

    def construct_bounded_int(self, node: yaml.ScalarNode) -> int:
        if len(node.value) > _MAX_INTEGER_CHARACTERS:
            raise _LimitError(
                node.start_mark,
                f"integer {node.value[:20]}... of {len(node.value)} characters is out of range "
                f"(at most {MAX_INTEGER})",
            )
        value: int = self.construct_yaml_int(node)
        if abs(value) > MAX_INTEGER:
            raise _LimitError(
                node.start_mark, f"integer {value} is out of range (at most {MAX_INTEGER})"
            )
        return value


_SpecLoader.add_constructor(_INT_TAG, _SpecLoader.construct_bounded_int)


def load(path: str | Path) -> Any:
    """The data of the YAML file at ``path``, checked against the limits of this module.

    Raises :class:`SpecFileError` for a file over :data:`MAX_FILE_BYTES`, not UTF-8, not a
    single YAML document, with a duplicate key, nested deeper than :data:`MAX_DEPTH`, expanding
    beyond :data:`MAX_EXPANDED_SIZE`, with a recursive alias or an integer beyond
    :data:`MAX_INTEGER`; ``OSError`` when the file cannot be read.
    """
    path = Path(path)
    with path.open("rb") as stream:
        data = stream.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise SpecFileError(
            path, f"larger than {MAX_FILE_BYTES // 1024} KiB; a spec file is a few KB of YAML"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise SpecFileError(
            path,
            f"not UTF-8 text (byte 0x{data[error.start]:02x})",
            data[: error.start].count(b"\n") + 1,
        ) from None
    try:
        _check_structure(text)
        return yaml.load(text, Loader=_SpecLoader)
    except _LimitError as error:
        raise SpecFileError(path, error.reason, error.line) from None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        reason = error.problem or error.context or type(error).__name__
        line = None if mark is None else mark.line + 1
        raise SpecFileError(path, f"not valid YAML ({reason})", line) from None
    except yaml.YAMLError as error:
        first_line = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise SpecFileError(path, f"not valid YAML ({first_line})") from None


@dataclass
class _Collection:
    """An open sequence or mapping while the events are read.

    ``size`` is what it expands to so far, ``height`` how many collections deep it goes (one
    when it holds only scalars).
    """

    anchor: str | None
    size: int = 1
    height: int = 1


def _check_structure(text: str) -> None:
    """Refuse nesting beyond :data:`MAX_DEPTH` and expansion beyond :data:`MAX_EXPANDED_SIZE`.

    Reads the parser's events, which need no recursion however deep the document, and tracks
    the size and height each anchored node expands to, so that an alias counts for everything
    it stands for. Stops at the first broken limit, before anything is built.
    """
    loader = _SpecLoader(text)
    open_collections: list[_Collection] = []
    anchors: dict[str, tuple[int, int]] = {}

    def close(size: int, height: int, anchor: str | None, mark: _Mark | None) -> None:
        if anchor is not None:
            anchors[anchor] = (size, height)
        if not open_collections:
            return
        parent = open_collections[-1]
        parent.size += size
        parent.height = max(parent.height, height + 1)
        if parent.size > MAX_EXPANDED_SIZE:
            raise _LimitError(
                mark,
                f"aliases expand the file beyond {MAX_EXPANDED_SIZE // 1024} KiB of content; "
                "repeat less through anchors and aliases",
            )

    try:
        while loader.check_event():
            event = loader.get_event()
            if isinstance(event, yaml.CollectionStartEvent):
                open_collections.append(_Collection(event.anchor))
                if len(open_collections) > MAX_DEPTH:
                    raise _LimitError(event.start_mark, f"nested deeper than {MAX_DEPTH} levels")
            elif isinstance(event, yaml.CollectionEndEvent):
                done = open_collections.pop()
                close(done.size, done.height, done.anchor, event.start_mark)
            elif isinstance(event, yaml.ScalarEvent):
                close(len(event.value) + 1, 0, event.anchor, event.start_mark)
            elif isinstance(event, yaml.AliasEvent):
                if any(c.anchor == event.anchor for c in open_collections):
                    raise _LimitError(
                        event.start_mark,
                        f"alias *{event.anchor} refers to a node that contains it; a spec "
                        "cannot be recursive",
                    )
                size, height = anchors.get(event.anchor or "", (0, 0))
                if len(open_collections) + height > MAX_DEPTH:
                    raise _LimitError(
                        event.start_mark,
                        f"alias *{event.anchor} nests the file deeper than {MAX_DEPTH} levels",
                    )
                close(size, height, None, event.start_mark)
    finally:
        loader.dispose()
