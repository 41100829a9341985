"""The manifests' YAML text, written straight from plain data.

Kubernetes objects are dicts, lists, strings, ints, bools and ``None``. For them,
:func:`block_yaml` writes the very text libyaml's emitter writes with :func:`dump_yaml
<eks_inference.output.yaml_dump.dump_yaml>`'s settings (block style, keys in the order given,
width 100, indent 2, no anchors, ASCII with escapes, multi-line strings as literal blocks)
without building a node tree: each distinct string's text is decided once (libyaml's scalar
analysis, which :func:`allowed_styles` reproduces, and PyYAML's resolver decide its style, as
they do for libyaml) and the documents are joined from those texts. libyaml's rules it mirrors,
from its ``emitter.c``:

* a block mapping's keys sit at its indent; a mapping in a mapping is indented by 2, a list in
  a mapping is not (``key:`` then ``- item`` at the key's column); a collection in a list item
  starts on the dash's line (``- a: 1``, ``- - a``) and is indented by 2; empty collections are
  written in flow style (``{}``, ``[]``);
* a scalar's text is indented by 2 from its collection's indent; a simple key is at most 128
  bytes on one line, written with ``:`` right after it;
* a string is plain when its analysis allows block plain and it resolves to a string; else
  single-quoted when allowed, else double-quoted with libyaml's escapes; a multi-line string is
  a literal block when allowed (with the indentation indicator ``2`` when it starts with a space
  or a line break, and chomping ``-`` without a final line break, ``+`` with more than one),
  else double-quoted;
* a value written in flow style folds at a space once its column passes the width (keys never
  fold), and a stream ends with ``...`` when the last literal block of its last document keeps
  its trailing line breaks.

Anything else (another type, a key that is not a string or is not a simple key, a root scalar,
a folded scalar nested 100 columns deep) makes :func:`block_yaml` return ``None``, and the
caller writes the stream with libyaml.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

import yaml

WIDTH = 100
"""libyaml's best width: a flow scalar folds at a space once its column passes it."""

_STR_TAG = "tag:yaml.org,2002:str"
_RESOLVER = yaml.resolver.Resolver()
_REPRESENTER = yaml.representer.SafeRepresenter()
# libyaml's line breaks: a key with one is not a simple key.
_BREAKS = frozenset("\r\n\x85\u2028\u2029")
_TO_ESCAPE = re.compile('[^ -~]|["\\\\]')
# Indicators that forbid a plain scalar in block context: at the start, one of these, or
# `?` or `-` before a space, a line break or the end; anywhere, `:` before one of those or
# `#` after a space or a line break.
_LEADING_INDICATORS = frozenset("#,[]{}&*!|>'\"%@`")
_SPACE_RUNS = re.compile("( +)")
_BLOCK_INDICATOR = re.compile(r"\A(?:---|\.\.\.|[?-](?:[ \n]|\Z))|:(?:[ \n]|\Z)|[ \n]#")
# libyaml's double-quoted escapes; other characters outside printable ASCII are \x, \u or \U.
_ESCAPES = {
    "\0": "\\0",
    "\a": "\\a",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\v": "\\v",
    "\f": "\\f",
    "\r": "\\r",
    "\x1b": "\\e",
    '"': '\\"',
    "\\": "\\\\",
    "\x85": "\\N",
    "\xa0": "\\_",
    "\u2028": "\\L",
    "\u2029": "\\P",
}
_EMPTY = {dict: " {}\n", list: " []\n"}


class _UnwritableError(Exception):
    """A value the fast writer leaves to libyaml."""


@functools.lru_cache(maxsize=1 << 16)
def scalar_tag(value: str, implicit: tuple[bool, bool]) -> str:
    """The tag a scalar's text resolves to: a pure function of the text (no path resolvers),
    asked for each scalar written, while the same few thousand texts recur."""
    tag: str = _RESOLVER.resolve(yaml.ScalarNode, value, implicit)  # type: ignore[no-untyped-call]
    return tag


def _escaped(char: str) -> str:
    if char in _ESCAPES:
        return _ESCAPES[char]
    if "\ud800" <= char <= "\udfff":
        raise _UnwritableError  # no UTF-8 for a lone surrogate: libyaml's path raises
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02X}"
    if code <= 0xFFFF:
        return f"\\u{code:04X}"
    return f"\\U{code:08X}"


def allowed_styles(text: str) -> tuple[bool, bool, bool]:
    """Whether libyaml may write ``text`` plain in block context, single-quoted, and as a
    literal block, for an ASCII-only emitter: its ``yaml_emitter_analyze_scalar`` (and PyYAML's
    ``Emitter.analyze_scalar``) in a few scans of the text rather than a loop over it, since
    dashboards are strings of many kilobytes."""
    if not text:
        return True, True, False
    # A character an ASCII-only emitter writes only escaped, in double quotes: all but printable
    # ASCII and the line feed (tabs, other breaks, controls, anything past ASCII). Two scans
    # in C, where a regular expression's character class takes ten times as long on a
    # dashboard.
    flat = text.replace("\n", "")
    if not (flat.isascii() and flat.isprintable()):
        return False, False, False
    space_break = " \n" in text
    break_space = "\n " in text
    edges = text[0] in " \n" or text[-1] in " \n"
    plain = not (
        edges or "\n" in text or text[0] in _LEADING_INDICATORS or _BLOCK_INDICATOR.search(text)
    )
    return plain, not (space_break or break_space), not (space_break or text[-1] == " ")


def _style(tag: str, text: str, literal: bool, key: bool) -> str:
    """libyaml's style for a scalar in block context, a simple key's when ``key``, a multi-line
    string's when ``literal``: ``""`` plain, ``'``, ``"`` or ``|``."""
    plain, single, block = allowed_styles(text)
    if literal:
        return "|" if block else '"'
    if plain and (text or not key) and scalar_tag(text, (True, False)) == tag:
        return ""
    if single:
        return "'"
    return '"'


def _flat(text: str, style: str) -> str:
    """A flow scalar's text on one line, as libyaml writes it where it does not fold."""
    if style == "":
        return text
    if style == "'":
        return "'" + text.replace("'", "''") + "'"
    return '"' + _TO_ESCAPE.sub(lambda match: _escaped(match.group()), text) + '"'


@functools.lru_cache(maxsize=1 << 16)
def _key_text(key: str) -> str:
    """A mapping key's text, followed by ``:``."""
    if len(key.encode("utf-8", "surrogatepass")) > 128 or not _BREAKS.isdisjoint(key):
        raise _UnwritableError  # libyaml writes it as a complex key, `? key`
    return _flat(key, _style(_STR_TAG, key, literal=False, key=True)) + ":"


@functools.lru_cache(maxsize=1 << 16)
def _string_form(text: str) -> tuple[str, str, int]:
    """A string value's style, its text after the indicator (``key:`` or ``-``) where it does
    not fold, and how far past the indicator's column its last space lies (it folds only if
    that reaches past the width)."""
    style = _style(_STR_TAG, text, literal="\n" in text, key=False)
    if style == "|":
        return style, "", 0
    flat = " " + _flat(text, style) + "\n"
    return style, flat, flat.rfind(" ")


@functools.lru_cache(maxsize=1 << 12)
def _folded(text: str, style: str, column: int, indent: int) -> str:
    """A flow scalar's text after its indicator at ``column``, folded as libyaml folds it: at
    the first space of a run of spaces (a lone space unless double-quoted, neither the first
    nor the last character) once the column passes the width, onto a new line at ``indent``;
    a double-quoted scalar marks the spaces left at the start of the new line with ``\\``."""
    if indent >= WIDTH:
        # libyaml starts a new line only when the column is past the indent: past the width, a
        # second fold of a double-quoted scalar would not.
        raise _UnwritableError
    pieces = [" ", style]
    column += 1 + len(style)
    position = 0
    last = len(text) - 1
    # Runs of other characters and runs of spaces, alternately.
    for number, part in enumerate(_SPACE_RUNS.split(text)):
        run = len(part)
        if number % 2 == 0:
            piece = _flat(part, style)[1:-1] if style else part
            column += len(piece)
        elif column > WIDTH and 0 < position < last and (style == '"' or run == 1):
            tail = "\\" + part[1:] if run > 1 else ""
            piece = "\n" + " " * indent + tail
            column = indent + len(tail)
        else:
            piece = part
            column += run
        pieces.append(piece)
        position += run
    pieces.append(style + "\n")
    return "".join(pieces)


@functools.lru_cache(maxsize=1 << 12)
def _literal(text: str, indent: int) -> tuple[str, bool]:
    """A literal block after its indicator, its lines at ``indent``, and whether it keeps its
    trailing line breaks (``+``)."""
    hint = "2" if text[0] in " \n" else ""
    keep = text == "\n" or text.endswith("\n\n")
    chomp = "+" if keep else "" if text.endswith("\n") else "-"
    pad = " " * indent
    lines = text.split("\n")
    if "" in lines:
        body = "\n".join(pad + line if line else "" for line in lines)
    else:
        body = pad + ("\n" + pad).join(lines)
    return f" |{hint}{chomp}\n{body}" + ("" if text.endswith("\n") else "\n"), keep


def _other_scalar(value: Any) -> str:
    """A ``None``, bool, int or float after its indicator, as its representer writes it."""
    node = _REPRESENTER.represent_data(value)
    return _plain_text(node.tag, node.value)


@functools.lru_cache(maxsize=1 << 12)
def _plain_text(tag: str, text: str) -> str:
    """A scalar of a tag other than a string's after its indicator: plain, when its text
    resolves back to its tag (libyaml would write the tag otherwise)."""
    if _style(tag, text, literal=False, key=False) != "" or " " in text:
        raise _UnwritableError
    return " " + text + "\n"


# None, bools and ints by value (typed: True is not 1); not floats, where 0.0 == -0.0.
_exact_scalar = functools.lru_cache(maxsize=1 << 12, typed=True)(_other_scalar)
_EXACT_SCALARS = (type(None), bool, int)


class _Writer:
    """One stream's text, as pieces; ``keep`` is whether the last literal block of the document
    being written keeps its trailing line breaks (after the last document, libyaml then ends
    the stream with ``...``)."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.keep = False

    def value(self, value: Any, indent: int, column: int, mapping: bool) -> None:
        """``value`` after its indicator (``key:`` or ``-``) at ``column``, in a collection at
        ``indent`` (a mapping's when ``mapping``, else a list's)."""
        kind = type(value)
        if kind is str:
            self.string(value, indent + 2, column)
        elif kind is dict or kind is list:
            if not value:
                self.pieces.append(_EMPTY[kind])
            elif kind is dict:
                if mapping:
                    self.pieces.append("\n")
                    self.mapping(value, indent + 2, " " * (indent + 2))
                else:
                    self.mapping(value, indent + 2, " ")
            elif mapping:
                self.pieces.append("\n")
                self.sequence(value, indent, " " * indent)
            else:
                self.sequence(value, indent + 2, " ")
        elif kind in _EXACT_SCALARS:
            self.pieces.append(_exact_scalar(value))
        elif kind is float:
            self.pieces.append(_other_scalar(value))
        else:
            raise _UnwritableError

    def string(self, text: str, indent: int, column: int) -> None:
        style, flat, reach = _string_form(text)
        if style == "|":
            block, self.keep = _literal(text, indent)
            self.pieces.append(block)
        elif column + reach <= WIDTH:
            self.pieces.append(flat)
        else:
            self.pieces.append(_folded(text, style, column, indent))

    def mapping(self, data: dict[Any, Any], indent: int, lead: str) -> None:
        """A block mapping at ``indent``; ``lead`` goes before its first key."""
        pieces = self.pieces
        pad = " " * indent
        for key, value in data.items():
            if type(key) is not str:
                raise _UnwritableError
            text = _key_text(key)
            pieces.append(lead + text)
            lead = pad
            if type(value) is str:
                self.string(value, indent + 2, indent + len(text))
            else:
                self.value(value, indent, indent + len(text), True)

    def sequence(self, items: list[Any], indent: int, lead: str) -> None:
        """A block sequence at ``indent``; ``lead`` goes before its first dash."""
        pieces = self.pieces
        pad = " " * indent
        for item in items:
            pieces.append(lead + "-")
            lead = pad
            if type(item) is str:
                self.string(item, indent + 2, indent + 1)
            else:
                self.value(item, indent, indent + 1, False)


def block_yaml(documents: Sequence[Any]) -> str | None:
    """``documents`` as the YAML stream libyaml writes with ``dump_yaml``'s settings, or
    ``None`` when one holds something this writer leaves to libyaml (see the module)."""
    writer = _Writer()
    try:
        for number, document in enumerate(documents):
            kind = type(document)
            if kind is not dict and kind is not list:
                return None
            if number:
                writer.pieces.append("---" + _EMPTY[kind] if not document else "---\n")
            elif not document:
                writer.pieces.append(_EMPTY[kind][1:])
            writer.keep = False
            if not document:
                continue
            if kind is dict:
                writer.mapping(document, 0, "")
            else:
                writer.sequence(document, 0, "")
    except _UnwritableError:
        return None
    if writer.keep:
        writer.pieces.append("...\n")
    return "".join(writer.pieces)
