"""Read a YAML spec file safely: bounded in size, depth and expansion, without duplicate keys.

A spec file is data a person wrote, or a file someone handed over. Plain ``yaml.safe_load``
accepts a repeated key and keeps the last (a second ``deployments: []`` silently drops every
deployment), expands aliases without bound (a few KB that render gigabytes), recurses once per
level of nesting (a traceback), and converts integers of any length. :func:`load` rejects all
of these with a :class:`SpecFileError` naming the file and line, in time and memory bounded by
:data:`MAX_FILE_BYTES`.

Only a regular file is read: a FIFO would block the reader forever and a device may never end,
so anything else is refused before it is opened for reading.

Plain scalars mean what YAML 1.2's core schema says, and a plain scalar that YAML 1.1 reads
differently is refused. PyYAML implements YAML 1.1, where ``012`` is 10, ``1:30`` is 90 and
``no`` is false; YAML 1.2 (the version editors, ``yq`` and most other libraries read) makes
them 12 and two strings. Resolving by either version alone would surprise the readers of the
other, silently; refusing the forms the two disagree on, with the spelling that means the same
to both, keeps a spec file one document whatever reads it. Integers are also written in
decimal (``0x10`` is refused): spec values count cores, tokens and replicas, and a hexadecimal
one is a typo or a string that lost its quotes.

Explicit tags (``!!int``, ``!!binary``, ``!foo``) are refused: the spec's types come from its
fields, a tag can only contradict them (``!!str 8192`` for a count), and the constructors of the
standard tags fail on odd values with exceptions that are not about the file.
"""

from __future__ import annotations

import functools
import math
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

# CloudFormation's limits stop a platform at about 300 deployments (docs/performance.md), some
# 150 KB of YAML at 500 bytes each; the reference file is 2 KB. Reading stops
# here, so a wrong path (a model file) fails at once; with MAX_NODES, the worst file accepted
# parses in a third of a second of CPU time.
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
# Keys, values and items of the file (aliases counting once). The reference file has 149 for
# three deployments, some 36 per deployment; 300 deployments with endpoints and overrides stay
# under half of this. A file of tiny nodes under MAX_FILE_BYTES may hold eight times as many,
# which take seconds to build and validate; refused while the file is read, they cost little.
MAX_NODES = 20_000
# Spec integers count cores, tokens, replicas, bytes or GiB: 64 bits hold them all, as they
# hold every integer of the Kubernetes and CloudFormation documents rendered from them.
MAX_INTEGER = 2**63 - 1
# Longer than any way of writing a 64-bit integer in YAML, so that a scalar of thousands of
# digits is refused before it is converted (Python refuses to convert more than 4,300 digits,
# with a ValueError that would surface as a traceback).
_MAX_INTEGER_CHARACTERS = 100

_NULL_TAG = "tag:yaml.org,2002:null"
_BOOL_TAG = "tag:yaml.org,2002:bool"
_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_STR_TAG = "tag:yaml.org,2002:str"

# The YAML 1.2 core schema's plain scalars (spec 1.2.2, section 10.3.2), with the merge key
# ``<<`` that YAML 1.1 defines and YAML 1.2 libraries keep as an extension.
_CORE_SCHEMA: tuple[tuple[str, str], ...] = (
    (_NULL_TAG, r"^(?:~|null|Null|NULL|)$"),
    (_BOOL_TAG, r"^(?:true|True|TRUE|false|False|FALSE)$"),
    (_INT_TAG, r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"),
    (
        _FLOAT_TAG,
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
    ),
    (_MERGE_TAG, r"^<<$"),
)

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
        self.line = _line(mark)
        self.reason = reason


def _line(mark: _Mark | None) -> int | None:
    """The 1-based line of a parser's mark."""
    return None if mark is None else mark.line + 1


class _SpecParser(_BaseLoader):
    """The safe loader's parser, resolving plain scalars by YAML 1.2's core schema.

    Only its events are read: :func:`_read_document` builds the data from them, checking every
    limit on the way, so nothing is parsed twice and nothing is built past a broken limit.
    """

    # Its own resolvers, the core schema's below, instead of the YAML 1.1 ones it inherits.
    yaml_implicit_resolvers: dict[Any, Any] = {}


for _tag, _pattern in _CORE_SCHEMA:
    _SpecParser.add_implicit_resolver(_tag, re.compile(_pattern), None)


def _core_value(tag: str, text: str) -> Any:
    """The value of a plain scalar the core schema resolved to ``tag``."""
    if tag == _NULL_TAG:
        return None
    if tag == _BOOL_TAG:
        return text.lower() == "true"
    if tag == _INT_TAG:
        if text.startswith(("0o", "0x")):
            return int(text[2:], 8 if text[1] == "o" else 16)
        return int(text, 10)
    if tag == _FLOAT_TAG:
        lowered = text.lower()
        if lowered.endswith(".nan"):
            return math.nan
        if lowered.endswith(".inf"):
            return -math.inf if lowered.startswith("-") else math.inf
        return float(text)
    return text


# Resolves plain scalars as the spec loader does (the resolver needs no document).
_SPEC_RESOLVER = _SpecParser("")

# YAML 1.1 as PyYAML reads it: the resolver and constructors of its safe loader.
_YAML_1_1_RESOLVER = yaml.resolver.Resolver()
_YAML_1_1_CONSTRUCTOR = yaml.constructor.SafeConstructor()
# YAML 1.1's boolean type has these too (https://yaml.org/type/bool.html); PyYAML leaves them
# out, other YAML 1.1 readers do not.
_YAML_1_1_SHORT_BOOLEANS = frozenset("yYnN")


def _plain_tag(resolver: yaml.resolver.BaseResolver, text: str) -> str:
    """The tag ``resolver`` gives ``text`` as a plain scalar."""
    tag: str = resolver.resolve(yaml.ScalarNode, text, (True, False))  # type: ignore[no-untyped-call]
    return tag


def _yaml_1_1_value(text: str) -> tuple[bool, Any]:
    """``(True, value)`` of a plain scalar read as YAML 1.1, or ``(False, None)`` when YAML 1.1
    cannot build it (an impossible date, a ``=``): only a different reading, not a failed one,
    counts as a disagreement."""
    if text in _YAML_1_1_SHORT_BOOLEANS:
        return True, text in "yY"
    tag = _plain_tag(_YAML_1_1_RESOLVER, text)
    if tag in (_STR_TAG, _MERGE_TAG):
        return True, text
    construct = _YAML_1_1_CONSTRUCTOR.yaml_constructors.get(tag)
    if construct is None:
        return False, None
    try:
        return True, construct(_YAML_1_1_CONSTRUCTOR, yaml.ScalarNode(tag, text))
    except (yaml.YAMLError, ValueError, TypeError, OverflowError):
        return False, None


def _same(first: Any, second: Any) -> bool:
    if type(first) is not type(second):
        return False
    if isinstance(first, float) and math.isnan(first):
        return math.isnan(second)
    return bool(first == second)


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        return f"the number {_canonical(value)}"
    if isinstance(value, str):
        return f"the text {value!r}"
    return f"a {type(value).__name__}"


# What a plain scalar must start with for YAML 1.1 or 1.2 to read it as anything but text (the
# first characters of every implicit resolver of either); the rest need no comparison, which
# keeps a file of thousands of names fast.
_MAYBE_TYPED = re.compile(r"^(?:[-+.0-9~<=yYnNtTfFoO]|$)")
# Numbers both versions read alike (a decimal integer without leading zeros, a decimal
# fraction), the most common typed scalars of a spec.
_READ_ALIKE = re.compile(r"^[-+]?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?$")


@functools.lru_cache(maxsize=4096)
def _plain_scalar_problem(text: str) -> str | None:
    """Why a plain scalar is refused (see the module docstring), or ``None``."""
    if not _MAYBE_TYPED.match(text) or _READ_ALIKE.match(text):
        return None
    tag = _plain_tag(_SPEC_RESOLVER, text)
    if tag == _MERGE_TAG:
        return None
    if tag == _INT_TAG:
        if len(text) > _MAX_INTEGER_CHARACTERS:
            # Refused by the constructor, which says how long it is.
            return None
        if text.startswith("0x") and int(text[2:], 16) <= MAX_INTEGER:
            return f"{text} is hexadecimal; write spec integers in decimal ({int(text[2:], 16)})"
    core = _core_value(tag, text)
    built, old = _yaml_1_1_value(text)
    if not built or _same(old, core):
        return None
    plain = old if isinstance(core, str) else core
    if plain is None or isinstance(plain, bool | int | float):
        fix = f"write {_canonical(plain)}, or {text!r} in quotes for text"
    else:
        fix = f"write {text!r} in quotes"
    return f"{text} is {_describe(old)} in YAML 1.1 but {_describe(core)} in YAML 1.2; {fix}"


def _canonical(value: bool | int | float | None) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
    return str(value)


def read_regular_file(path: Path, limit: int = MAX_FILE_BYTES, kind: str = "a YAML file") -> bytes:
    """At most ``limit`` + 1 bytes of ``path``, which must be a regular file: in bounded time
    whatever the path names, for any file a program is handed (a spec file, the CDK CLI's
    context file).

    ``stat`` refuses a FIFO or a device before anything opens it (opening a FIFO for reading
    waits for a writer); the file is then opened without blocking and checked again, in case
    the path was replaced in between. Raises :class:`SpecFileError` for a path that is not a
    regular file or holds a NUL byte (which no file name can), saying to give ``kind``;
    ``OSError`` when the file cannot be read.
    """
    if "\0" in str(path):
        raise SpecFileError(path, f"the path holds a NUL byte, which no file name can; give {kind}")
    try:
        mode = path.stat().st_mode
    except OSError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        raise SpecFileError(path, f"not a regular file ({_file_kind(mode)}); give {kind}")
    # A missing file or one that cannot be opened fails here with its own OSError.
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    with os.fdopen(descriptor, "rb") as stream:
        opened = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(opened):
            raise SpecFileError(path, f"not a regular file ({_file_kind(opened)}); give {kind}")
        return stream.read(limit + 1)


def _file_kind(mode: int) -> str:
    kinds = (
        (stat.S_ISFIFO, "a named pipe"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
    )
    return next((kind for test, kind in kinds if test(mode)), "a special file")


def load(path: str | Path) -> Any:
    """The data of the YAML file at ``path``, checked against the limits of this module.

    Raises :class:`SpecFileError` for a path that is not a regular file (or holds a NUL
    byte), a file over
    :data:`MAX_FILE_BYTES`, not UTF-8, not a single YAML document, of more than
    :data:`MAX_NODES` nodes, with an explicit tag or a plain scalar YAML 1.1 and 1.2 read
    differently, with a duplicate key, nested deeper than :data:`MAX_DEPTH`, expanding
    beyond :data:`MAX_EXPANDED_SIZE`, with a recursive alias or an integer beyond
    :data:`MAX_INTEGER`; ``OSError`` when the file cannot be read.
    """
    path = Path(path)
    data = read_regular_file(path)
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
        return _read_document(text)
    except _LimitError as error:
        raise SpecFileError(path, error.reason, error.line) from None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        reason = error.problem or error.context or type(error).__name__
        line = None if mark is None else mark.line + 1
        raise SpecFileError(path, f"not valid YAML ({reason})", line) from None
    except yaml.YAMLError as error:
        first_line = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise SpecFileError(path, f"not valid YAML ({first_line})", _line_of(text, error)) from None


def _line_of(text: str, error: yaml.YAMLError) -> int | None:
    """The 1-based line of a character YAML does not allow (a NUL, a lone control character).

    The reader stops at the first one; its offset counts bytes in libyaml and characters in
    PyYAML's own reader, so the line is found from the character itself.
    """
    character = getattr(error, "character", None)
    if not isinstance(character, int):
        return None
    found = text.find(chr(character))
    return None if found < 0 else text.count("\n", 0, found) + 1


def _short_tag(tag: str) -> str:
    """A tag as it is usually written: ``!!int`` for YAML's own, ``!<...>`` for a long one."""
    if tag.startswith("tag:yaml.org,2002:"):
        return "!!" + tag.removeprefix("tag:yaml.org,2002:")
    if tag.startswith("!"):
        return tag[:40]
    return f"!<{tag[:40]}>"


# The value of a plain ``<<`` read as a mapping's key: YAML 1.1's merge key, which YAML 1.2
# libraries keep as an extension. As a value it is the text ``<<``.
_MERGE = object()


@dataclass
class _Collection:
    """An open sequence or mapping while the events are read.

    ``items`` are a sequence's items, or a mapping's keys and values in turn; ``keys`` how each
    key of a mapping was written (its text and mark), for the messages. ``size`` is what the
    collection expands to so far, ``height`` how many collections deep it goes (one when it
    holds only scalars).
    """

    anchor: str | None
    mapping: bool
    start: _Mark | None
    items: list[Any] = field(default_factory=list)
    keys: list[tuple[str, _Mark | None]] = field(default_factory=list)
    size: int = 1
    height: int = 1

    def expects_key(self) -> bool:
        return self.mapping and len(self.items) % 2 == 0

    def value(self) -> list[Any] | dict[Any, Any]:
        return _mapping(self) if self.mapping else self.items


def _read_document(text: str) -> Any:
    """The data of the one YAML document in ``text``, refusing nesting beyond
    :data:`MAX_DEPTH`, expansion beyond :data:`MAX_EXPANDED_SIZE`, more than
    :data:`MAX_NODES` nodes, explicit tags, plain scalars YAML 1.1 and 1.2 read differently,
    duplicate keys and integers beyond :data:`MAX_INTEGER`.

    Builds the data from the parser's events, which need no recursion however deep the
    document, and tracks the size and height each anchored node expands to, so that an alias
    counts for everything it stands for. Stops at the first broken limit; what it builds is
    what PyYAML's safe loader builds from a file it accepts (YAML 1.1 and 1.2 agree on every
    plain scalar of such a file), aliases included: they share the anchored value.
    """
    parser = _SpecParser(text)
    open_collections: list[_Collection] = []
    anchors: dict[str, tuple[Any, int, int, _Mark | None]] = {}
    nodes = 0
    documents = 0
    root: Any = None

    def add(value: Any, size: int, height: int, anchor: str | None, mark: _Mark | None) -> None:
        nonlocal root
        if anchor is not None:
            if anchor in anchors:
                first = _line(anchors[anchor][3])
                raise _LimitError(
                    mark,
                    f"not valid YAML (anchor &{anchor} is defined twice, first at line {first})",
                )
            anchors[anchor] = (value, size, height, mark)
        if not open_collections:
            root = value
            return
        parent = open_collections[-1]
        if parent.mapping and len(parent.items) % 2 == 0:
            parent.keys.append((_key_text(value), mark))
        parent.items.append(value)
        parent.size += size
        parent.height = max(parent.height, height + 1)
        if parent.size > MAX_EXPANDED_SIZE:
            raise _LimitError(
                mark,
                f"aliases expand the file beyond {MAX_EXPANDED_SIZE // 1024} KiB of content; "
                "repeat less through anchors and aliases",
            )

    try:
        while parser.check_event():
            event = parser.get_event()
            if isinstance(event, yaml.DocumentStartEvent):
                documents += 1
                if documents > 1:
                    raise _LimitError(
                        event.start_mark,
                        "not valid YAML (a second document; a spec file is one document)",
                    )
            if isinstance(event, yaml.CollectionEndEvent):
                done = open_collections.pop()
                add(done.value(), done.size, done.height, done.anchor, done.start)
                continue
            if not isinstance(event, yaml.NodeEvent):
                continue
            nodes += 1
            if nodes > MAX_NODES:
                raise _LimitError(
                    event.start_mark,
                    f"more than {MAX_NODES} keys, values and items; a platform of 300 "
                    "deployments has about 11000",
                )
            # Scalars and collections carry a tag; aliases do not.
            tag = getattr(event, "tag", None)
            if tag is not None:
                raise _LimitError(
                    event.start_mark,
                    f"explicit YAML tag {_short_tag(tag)} is not accepted (a spec's fields "
                    "give its types); write the value without it, in quotes for text",
                )
            if isinstance(event, yaml.ScalarEvent):
                value: Any = event.value
                if event.implicit[0]:
                    key = bool(open_collections) and open_collections[-1].expects_key()
                    value = _plain_value(event.value, event.start_mark, key)
                add(value, len(event.value) + 1, 0, event.anchor, event.start_mark)
            elif isinstance(event, yaml.CollectionStartEvent):
                mapping = isinstance(event, yaml.MappingStartEvent)
                open_collections.append(_Collection(event.anchor, mapping, event.start_mark))
                if len(open_collections) > MAX_DEPTH:
                    raise _LimitError(event.start_mark, f"nested deeper than {MAX_DEPTH} levels")
            elif isinstance(event, yaml.AliasEvent):
                anchor = event.anchor or ""
                if any(c.anchor == anchor for c in open_collections):
                    raise _LimitError(
                        event.start_mark,
                        f"alias *{anchor} refers to a node that contains it; a spec "
                        "cannot be recursive",
                    )
                if anchor not in anchors:
                    raise _LimitError(
                        event.start_mark,
                        f"not valid YAML (alias *{anchor} has no anchor before it)",
                    )
                value, size, height, _ = anchors[anchor]
                if len(open_collections) + height > MAX_DEPTH:
                    raise _LimitError(
                        event.start_mark,
                        f"alias *{anchor} nests the file deeper than {MAX_DEPTH} levels",
                    )
                add(value, size, height, None, event.start_mark)
    finally:
        parser.dispose()
    return root


def _plain_value(text: str, mark: _Mark | None, key: bool) -> Any:
    """What a plain scalar means by YAML 1.2's core schema; refused when YAML 1.1 reads it
    differently or it is an integer beyond :data:`MAX_INTEGER`."""
    if not _MAYBE_TYPED.match(text):
        return text
    if _READ_ALIKE.match(text):
        tag = _FLOAT_TAG if "." in text else _INT_TAG
    else:
        problem = _plain_scalar_problem(text)
        if problem is not None:
            raise _LimitError(mark, problem)
        tag = _plain_tag(_SPEC_RESOLVER, text)
    if tag == _MERGE_TAG:
        return _MERGE if key else text
    if tag == _INT_TAG:
        if len(text) > _MAX_INTEGER_CHARACTERS:
            raise _LimitError(
                mark,
                f"integer {text[:20]}... of {len(text)} characters is out of range "
                f"(at most {MAX_INTEGER})",
            )
        number: int = _core_value(tag, text)
        if abs(number) > MAX_INTEGER:
            shown = text if len(text) <= 20 else text[:20] + "..."
            raise _LimitError(mark, f"integer {shown} is out of range (at most {MAX_INTEGER})")
        return number
    return _core_value(tag, text)


def _key_text(key: Any) -> str:
    """A key as the messages show it: its text for a scalar."""
    if key is _MERGE:
        return "<<"
    if isinstance(key, str):
        return key
    if isinstance(key, bool | int | float) or key is None:
        return _canonical(key)
    return f"a {type(key).__name__}"


def _mapping(collection: _Collection) -> dict[Any, Any]:
    """A mapping's keys and values as a dict: merged keys (``<<``) first, then the ones given
    explicitly, each of which may override a merged one but not repeat another."""
    merged: list[tuple[Any, Any]] = []
    explicit: dict[Any, Any] = {}
    lines: dict[Any, int | None] = {}
    pairs = zip(collection.items[::2], collection.items[1::2], collection.keys, strict=True)
    for key, value, (text, mark) in pairs:
        if key is _MERGE:
            merged += _merged_pairs(value, mark)
            continue
        if isinstance(key, list | dict):
            raise _LimitError(
                mark, f"not valid YAML (a {type(key).__name__} as a key; keys are text)"
            )
        if key in lines:
            raise _LimitError(
                mark,
                f"duplicate key {text!r} (first at line {lines[key]}); YAML would keep only "
                "the last, silently",
            )
        lines[key] = _line(mark)
        explicit[key] = value
    if not merged:
        return explicit
    built: dict[Any, Any] = {}
    for key, value in merged:
        built.setdefault(key, value)
    built.update(explicit)
    return built


def _merged_pairs(value: Any, mark: _Mark | None) -> list[tuple[Any, Any]]:
    """The keys and values a merge key's value brings, in order: a mapping's, or those of a
    list of mappings. The first of a key counts, so an earlier mapping overrides a later
    one, as YAML's merge key defines."""
    if isinstance(value, dict):
        return list(value.items())
    if isinstance(value, list) and all(isinstance(item, dict) for item in value):
        return [pair for item in value for pair in item.items()]
    raise _LimitError(
        mark, "not valid YAML (a merge key (<<) takes a mapping or a list of mappings)"
    )
