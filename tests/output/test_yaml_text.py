"""The manifests' YAML written straight from the data is libyaml's text, byte for byte.

:func:`~eks_inference.output.yaml_text.block_yaml` writes most streams; libyaml's emitter
(:func:`~eks_inference.output.yaml_dump.libyaml_yaml`) writes the rest and is the reference.
Held to it: every manifest file of every platform the chart tests render, and any JSON-like
documents of hostile strings (every indicator, quote, escape, line break and resolvable text,
keys of each kind, long enough to fold, nested deep). The fast writer must also be the one
writing nearly every document of the reference and 100-deployment platforms, and decline
exactly what it leaves to libyaml.
"""

from __future__ import annotations

import functools
import io
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from eks_inference.charts.render import platform_charts
from eks_inference.output.yaml_dump import dump_yaml, libyaml_yaml
from eks_inference.output.yaml_text import allowed_styles, block_yaml
from tests.helpers.written_platforms import PLATFORMS, writer_context


@functools.cache
def _documents(name: str) -> dict[str, list[Any]]:
    """Each manifest file's documents for the platform called ``name``."""
    platform = PLATFORMS[name]()
    charts = platform_charts(platform, writer_context(platform))
    return {path: list(chart.objects) for path, chart in charts.items()}


@pytest.mark.parametrize("name", sorted(PLATFORMS))
def test_every_manifest_file_is_libyamls_text(name: str) -> None:
    for path, documents in _documents(name).items():
        text = block_yaml(documents)
        assert text is None or text == libyaml_yaml(documents), path
        assert dump_yaml(documents) == libyaml_yaml(documents), path


@pytest.mark.parametrize("name", ["reference", "generated-100"])
def test_the_fast_writer_writes_nearly_every_document(name: str) -> None:
    files = _documents(name).values()
    written = sum(len(documents) for documents in files if block_yaml(documents) is not None)
    total = sum(len(documents) for documents in files)
    assert total > 0
    assert written >= 0.95 * total


# Pieces of hostile strings: every indicator at the start, middle or end of a text, line
# breaks of every kind, control, non-ASCII and non-BMP characters, texts that resolve to
# another type, and runs long enough to pass the width or a simple key's 128 bytes.
_PIECES = [
    *" \n\t\r\x00\x07\x1b\x7f\x85\xa0\u2028\u2029\ufeff\\",
    *"-?:#&*!|>'\"%@`,[]{}=~<",
    *("é", "中", "\U0001f600", "\U0010fffd"),
    *(": ", " #", "- ", "? ", "---", "...", "  ", "\n\n", "\r\n", " \n", "\n "),
    *("yes", "No", "on", "OFF", "y", "null", "Null", "true", "False", "1", "-7", "0755"),
    *("0x1F", "0o17", "0b101", "1e3", "1_000", "1.5", ".inf", "-.Inf", ".NaN", "<<", "12:30:45"),
    *("2001-12-14", "2001-12-14t21:59:43.10-05:00", "a", "word", "x" * 40, "y" * 99),
]
_HOSTILE = st.one_of(
    st.sampled_from(_PIECES),
    st.lists(st.sampled_from(_PIECES), max_size=12).map("".join),
    st.text(max_size=30),
    # Words and spaces past the width, so that flow scalars fold at every column.
    st.lists(st.text(alphabet="ab'\"#:-\\\n\t", max_size=12), min_size=5, max_size=40).map(
        " ".join
    ),
)
_BREAKS = "\r\n\x85\u2028\u2029"


def _key(draw: tuple[int, str]) -> str:
    """Nine keys in ten on one line; any may pass 128 bytes."""
    chance, text = draw
    return text if chance == 0 else "".join(char for char in text if char not in _BREAKS)


_KEYS = st.tuples(st.integers(0, 9), _HOSTILE).map(_key)
_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), _HOSTILE)
_NODE = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=4),
    max_leaves=25,
)
# Documents are collections, as Kubernetes objects are (root scalars are left to libyaml).
_DOCUMENT = st.lists(_NODE, max_size=4) | st.dictionaries(_KEYS, _NODE, max_size=4)


def _fast_writes(value: Any, root: bool = True) -> bool:
    """Whether the fast writer must write ``value``: a dict or list at the root, of strings,
    ints, floats, bools and ``None``, every key a string libyaml writes as a simple key (one
    line, at most 128 bytes)."""
    if isinstance(value, dict):
        return all(
            isinstance(key, str)
            and not any(char in _BREAKS for char in key)
            and len(key.encode()) <= 128
            and _fast_writes(item, root=False)
            for key, item in value.items()
        )
    if isinstance(value, list):
        return all(_fast_writes(item, root=False) for item in value)
    return not root


@pytest.mark.long
@settings(max_examples=300, deadline=None)
@given(st.lists(_DOCUMENT, max_size=3))
def test_any_documents_are_libyamls_text(documents: list[Any]) -> None:
    text = block_yaml(documents)
    expected = libyaml_yaml(documents)
    if all(_fast_writes(document) for document in documents):
        assert text == expected
    else:
        assert text is None
    assert dump_yaml(documents) == expected


@settings(max_examples=1000, deadline=None)
@given(_HOSTILE)
def test_allowed_styles_are_pyyamls_analysis(text: str) -> None:
    """The styles a text allows are those PyYAML's emitter (libyaml's rules) allows it."""
    analysis = yaml.emitter.Emitter(io.StringIO()).analyze_scalar(text)
    assert allowed_styles(text) == (
        analysis.allow_block_plain,
        analysis.allow_single_quoted,
        analysis.allow_block,
    )


_SHAPE = st.lists(st.sampled_from(["dict", "list"]), max_size=60)


def _nested(shape: list[str], leaf: Any) -> Any:
    for kind in reversed(shape):
        leaf = {"k": leaf, "next": "x"} if kind == "dict" else ["x", leaf]
    return leaf


@settings(max_examples=200, deadline=None)
@given(_SHAPE, _HOSTILE)
def test_deep_nesting_is_libyamls_text(shape: list[str], leaf: str) -> None:
    """Nesting up to 60 deep puts scalars past the width; the fast writer writes them, or
    leaves to libyaml a scalar that would fold 100 columns deep."""
    documents = [_nested(shape, leaf), _nested(shape, {leaf[:128].replace("\n", " "): leaf})]
    text = block_yaml(documents)
    assert text is None or text == libyaml_yaml(documents)
    assert dump_yaml(documents) == libyaml_yaml(documents)


_WORDS = " ".join(["fold", "here", "'quoted'", "#c", "a:b", "é"] * 12)


@pytest.mark.parametrize(
    "documents",
    [
        [{"a": 1}, {"b": [1, 2]}, {}, [], {"c": {}}],
        [[["a", ["b"]], {"k": [{"x": None, "y": True}]}]],
        [{"text": "line\n  indented\n\nlast\n"}, ["- a\nb", "\nlead", "keep\n\n"]],
        [{"keep": "x\n\n"}],
        [{"keep": "\n"}, {"then": "strip"}],
        [{"": "", "null": "~", "true": "yes", "1": "0x1F", "- a": "a: b", "#x": " x"}],
        [{"tab\tkey": "tab\tvalue", "é": "\U0001f600", "q'": 'q"', "ctl": "\x00\x1b\x7f"}],
        [{"plain": _WORDS, "quoted": "'" + _WORDS, "double": "\t" + _WORDS}],
        [[_WORDS, {"deeper": [{"deeper": _WORDS}]}]],
        [{"floats": [1.5, 1e20, -0.0, float("inf"), float("-inf"), float("nan"), 5e-324]}],
        [{"ints": [0, -7, 2**70], "bools": [True, False]}],
    ],
)
def test_each_rule_is_libyamls(documents: list[Any]) -> None:
    """One document per rule of the module's list, each written by the fast writer."""
    assert block_yaml(documents) == libyaml_yaml(documents)


# Texts that fold past the width: plain, single-quoted (a quote first), double-quoted (a tab
# first); lone spaces, runs of spaces, a space first and last, quotes and escapes to count.
_FOLDING = [
    " ".join(["word", "a:b", "'quoted'", "#c"] * 12),
    "'" + "it's  a run " * 15,
    "\t" + 'a  b   c \\ "q" é ' * 12 + " ",
]


@pytest.mark.parametrize("text", _FOLDING)
def test_folding_at_every_column_is_libyamls(text: str) -> None:
    """The same text starting at every column to past the width, as a value and an item."""
    for length in range(1, 110):
        documents = [{"k" * length: text}, ["-" * length, [{"k" * length: [text]}]]]
        assert block_yaml(documents) == libyaml_yaml(documents), length


@pytest.mark.parametrize(
    "documents",
    [
        ["a root scalar"],
        [{"k": "v"}, None],
        [{"x" * 129: 1}],
        [{"two\nlines": 1}],
        [{"carriage\rreturn": 1}],
        [{1: "int key"}],
        [{"set": {1}}],
    ],
)
def test_what_the_fast_writer_leaves_to_libyaml(documents: list[Any]) -> None:
    """Root scalars, complex keys, keys that are not strings and other types: libyaml's
    path writes them, as before."""
    assert block_yaml(documents) is None
    assert dump_yaml(documents) == libyaml_yaml(documents)
