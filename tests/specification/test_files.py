"""Reading spec files (issue 13, items 6-8): no duplicate keys, and bounded size, depth,
alias expansion and integers, each refused with a one-line :class:`SpecFileError` that names
the file and the line, through ``PlatformSpec.from_yaml`` with libyaml's parser and through
the module's own copy built with PyYAML's parser. Issue 17: only regular files, no explicit
tags, and no plain scalar that YAML 1.1 and YAML 1.2 read differently.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
import time
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from eks_inference.specification import files as spec_file
from eks_inference.specification.files import (
    MAX_DEPTH,
    MAX_FILE_BYTES,
    MAX_INTEGER,
    MAX_NODES,
    SpecFileError,
)
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.platforms import REFERENCE_PLATFORM

REFERENCE_TEXT = REFERENCE_PLATFORM.read_text()
REFERENCE_LINES = REFERENCE_TEXT.count("\n")


def write(tmp_path: Path, content: str | bytes, name: str = "platform.yaml") -> Path:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def refused(path: Path) -> SpecFileError:
    with pytest.raises(SpecFileError) as raised:
        PlatformSpec.from_yaml(path)
    assert len(str(raised.value).splitlines()) == 1
    assert str(raised.value).startswith(str(path))
    return raised.value


def billion_laughs(levels: int = 9) -> str:
    """Ten items, then ``levels`` lists of ten aliases of the list before: 10**(levels+1)."""
    lines = ["      l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    for level in range(1, levels + 1):
        aliases = ", ".join([f"*l{level - 1}"] * 10)
        lines.append(f"      l{level}: &l{level} [{aliases}]")
    return "\n".join(lines) + "\n"


# Item 6: duplicate keys.


def test_a_repeated_key_is_refused_with_both_lines(tmp_path: Path) -> None:
    path = write(tmp_path, REFERENCE_TEXT + "model_bucket_name: another-bucket\n")
    error = refused(path)
    assert error.line == REFERENCE_LINES + 1
    first = REFERENCE_TEXT.splitlines().index("model_bucket_name: eks-inference-models-example")
    assert f"duplicate key 'model_bucket_name' (first at line {first + 1})" in error.reason


def test_a_second_deployments_key_cannot_drop_every_deployment(tmp_path: Path) -> None:
    error = refused(write(tmp_path, REFERENCE_TEXT + "deployments: []\n"))
    assert "duplicate key 'deployments'" in error.reason


def test_a_repeated_key_inside_a_deployment_is_refused(tmp_path: Path) -> None:
    text = REFERENCE_TEXT.replace(
        "    tensor_parallel_size: 8\n",
        "    tensor_parallel_size: 8\n    tensor_parallel_size: 2\n",
    )
    error = refused(write(tmp_path, text))
    assert "duplicate key 'tensor_parallel_size'" in error.reason


def test_keys_equal_as_values_are_duplicates(tmp_path: Path) -> None:
    # 1 and 1.0 are one dict key, so the second would replace the first.
    with pytest.raises(SpecFileError, match=r"duplicate key '1\.0'"):
        spec_file.load(write(tmp_path, "1: a\n1.0: b\n"))


def test_merge_keys_may_be_overridden_explicitly(tmp_path: Path) -> None:
    text = (
        "base: &base {max_model_len: 4096, max_num_seqs: 32}\n"
        "limits:\n  <<: *base\n  max_num_seqs: 16\n"
    )
    data = spec_file.load(write(tmp_path, text))
    assert data["limits"] == {"max_model_len": 4096, "max_num_seqs": 16}


# Item 7: alias expansion.


def test_alias_expansion_in_overrides_is_refused_before_anything_is_built(tmp_path: Path) -> None:
    text = REFERENCE_TEXT.replace(
        "      sequence_buckets: [128, 512, 1024, 2048, 4096]\n",
        "      sequence_buckets: [128, 512, 1024, 2048, 4096]\n      overrides:\n"
        + billion_laughs(),
    )
    assert len(text.encode()) < 4096
    started = time.monotonic()
    error = refused(write(tmp_path, text))
    assert "aliases expand the file beyond" in error.reason
    assert time.monotonic() - started < 10


def test_anchors_that_share_settings_are_accepted(tmp_path: Path) -> None:
    text = REFERENCE_TEXT.replace(
        "    limits: {max_model_len: 8192, max_num_seqs: 16}\n",
        "    limits: &gpu_limits {max_model_len: 8192, max_num_seqs: 16}\n",
    ).replace("    limits: {max_model_len: 8192, max_num_seqs: 32}\n", "    limits: *gpu_limits\n")
    platform = PlatformSpec.from_yaml(write(tmp_path, text))
    assert platform.deployment("qwen25-7b-g6e").limits.max_num_seqs == 16


def test_a_recursive_alias_is_refused(tmp_path: Path) -> None:
    error = refused(write(tmp_path, "model_bucket_name: &a [x, *a]\n"))
    assert "alias *a refers to a node that contains it" in error.reason
    assert error.line == 1


def test_aliases_count_towards_the_depth(tmp_path: Path) -> None:
    half = MAX_DEPTH // 2 + 1
    text = f"a: &deep {'[' * half}{']' * half}\nb: {'[' * half}*deep{']' * half}\n"
    error = refused(write(tmp_path, text))
    assert f"alias *deep nests the file deeper than {MAX_DEPTH} levels" in error.reason
    assert error.line == 2


# Item 8: inputs that used to end in a traceback.


def _pure_python_spec_file(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """A separate copy of the module built without libyaml, as on a PyYAML without it."""
    monkeypatch.delattr(yaml, "CSafeLoader")
    found = importlib.util.spec_from_file_location("spec_file_pure_python", spec_file.__file__)
    assert found is not None
    assert found.loader is not None
    module = importlib.util.module_from_spec(found)
    monkeypatch.setitem(sys.modules, found.name, module)
    found.loader.exec_module(module)
    assert module._BaseLoader is yaml.SafeLoader
    return module


BAD_FILES = [
    pytest.param("a: " + "[" * 5000 + "]" * 5000 + "\n", 1, "nest", id="deep-flow"),
    pytest.param(
        "".join(f"{' ' * i}k:\n" for i in range(MAX_DEPTH + 5)),
        MAX_DEPTH + 1,
        f"nested deeper than {MAX_DEPTH} levels",
        id="deep-block",
    ),
    pytest.param(
        b"model_bucket_name: ok\nregion: \xff\xfe\n", 2, "not UTF-8 text (byte 0xff)", id="latin-1"
    ),
    pytest.param("a: " + "9" * 5000 + "\n", 1, "of 5000 characters is out of range", id="digits"),
    pytest.param(f"a: {MAX_INTEGER + 1}\n", 1, "is out of range", id="beyond-64-bits"),
    pytest.param(f"a: -{MAX_INTEGER + 1}\n", 1, "is out of range", id="below-64-bits"),
    pytest.param("a: 1\n---\nb: 2\n", 2, "not valid YAML", id="two-documents"),
    pytest.param("a: [\n", 2, "not valid YAML", id="unclosed"),
    pytest.param("a: \x00\n", None, "not valid YAML", id="nul"),
    # libyaml counts the offset of a forbidden character in bytes, PyYAML in characters.
    pytest.param(
        "a: caf\u00e9 \u00e9t\u00e9\nb: \u00fc\nc: x\x00y\n",
        3,
        "not valid YAML",
        id="nul-at-its-line",
    ),
    pytest.param("a: *nowhere\n", 1, "not valid YAML", id="undefined-alias"),
    pytest.param(
        "a: !!python/object:os.system x\n",
        1,
        "explicit YAML tag !!python/object:os.system is not accepted",
        id="python-tag",
    ),
    pytest.param(
        "# " + "x" * MAX_FILE_BYTES + "\n",
        None,
        f"larger than {MAX_FILE_BYTES // 1024} KiB",
        id="over-the-size-cap",
    ),
]


@pytest.mark.parametrize("parser", ["libyaml", "pure-python"])
@pytest.mark.parametrize(("content", "line", "reason"), BAD_FILES)
def test_bad_files_fail_with_a_line_not_a_traceback(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    parser: str,
    content: str | bytes,
    line: int | None,
    reason: str,
) -> None:
    path = write(tmp_path, content)
    if parser == "libyaml":
        error = refused(path)
    else:
        module = _pure_python_spec_file(monkeypatch)
        with pytest.raises(module.SpecFileError) as raised:
            module.load(path)
        error = raised.value
    assert reason in error.reason
    if line is not None:
        assert error.line == line
    assert len(str(error).splitlines()) == 1


def test_a_fifty_megabyte_file_is_refused_without_reading_it(tmp_path: Path) -> None:
    path = tmp_path / "weights.safetensors"
    with path.open("wb") as stream:
        stream.truncate(50 * 1024 * 1024)
    error = refused(path)
    assert error.reason.startswith("larger than")


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_an_endless_device_is_refused_before_it_is_read() -> None:
    error = refused(Path("/dev/zero"))
    assert error.reason.startswith("not a regular file (a character device)")


def test_the_largest_file_without_aliases_is_accepted(tmp_path: Path) -> None:
    # As many nodes as allowed, as long as the size cap allows: the expansion cap must not
    # refuse a file under both.
    items = MAX_NODES - 1
    length = (MAX_FILE_BYTES - 2) // items - 1
    text = "[" + ",".join(["a" * length] * items) + "]"
    assert len(text) <= MAX_FILE_BYTES
    data = spec_file.load(write(tmp_path, text))
    assert len(data) == items


def test_a_file_of_more_nodes_than_a_platform_has_is_refused_while_it_is_read(
    tmp_path: Path,
) -> None:
    error = refused(write(tmp_path, "".join(f"k{i}: {i}\n" for i in range(MAX_NODES))))
    assert f"more than {MAX_NODES} keys, values and items" in error.reason
    # The mapping, then two nodes a line: the line of the last node allowed is the limit.
    assert error.line == MAX_NODES // 2


def test_the_reference_file_loads_as_before(tmp_path: Path) -> None:
    assert spec_file.load(REFERENCE_PLATFORM) == yaml.safe_load(REFERENCE_TEXT)


# Issue 17, item 5: only regular files are read.


def test_a_named_pipe_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "platform.yaml"
    os.mkfifo(fifo)
    outcome: list[BaseException] = []
    reader = threading.Thread(target=_load_into, args=(fifo, outcome), daemon=True)
    reader.start()
    reader.join(timeout=10)
    if reader.is_alive():
        # Opening the pipe for writing releases the reader, so that the test run can end.
        os.close(os.open(fifo, os.O_WRONLY))
        pytest.fail("reading a named pipe waited for a writer")
    assert isinstance(outcome[0], SpecFileError)
    assert outcome[0].reason == "not a regular file (a named pipe); give a YAML file"


def _load_into(path: Path, outcome: list[BaseException]) -> None:
    try:
        spec_file.load(path)
    except BaseException as error:
        outcome.append(error)


def test_a_directory_is_refused_as_not_a_regular_file(tmp_path: Path) -> None:
    error = refused(tmp_path)
    assert error.reason == "not a regular file (a directory); give a YAML file"


def test_a_symbolic_link_to_a_regular_file_is_read(tmp_path: Path) -> None:
    link = tmp_path / "platform.yaml"
    link.symlink_to(REFERENCE_PLATFORM)
    assert spec_file.load(link) == yaml.safe_load(REFERENCE_TEXT)


# Issue 17, item 8: explicit tags, whatever their value.

# Every standard tag, with values its constructor refuses and values it accepts, a custom
# tag and a verbatim one: none may crash, none may change what a field means.
TAGGED = [
    "!!int abc",
    '!!int ""',
    "!!int 0b102",
    "!!int 1:",
    "!!int 8",
    '!!float ""',
    "!!float 1:x",
    "!!float 8",
    "!!bool maybe",
    "!!bool yes",
    "!!null x",
    "!!timestamp 2001-13-45",
    "!!timestamp 2001-02-30",
    "!!timestamp 2001-12-14",
    "!!binary ===",
    "!!binary aGVsbG8=",
    "!!omap abc",
    "!!omap [{a: 1}, {a: 2}]",
    "!!omap [{a: 1, b: 2}]",
    "!!pairs [a]",
    "!!set {a: 1}",
    "!!set [a, b]",
    "!!seq abc",
    "!!seq {a: 1}",
    "!!map [1]",
    "!!str 8192",
    "!!str [1]",
    "!!merge x",
    "!!value x",
    "!!python/name:os.system",
    "!foo bar",
    "!foo {a: 1}",
    "! 8192",
    "!<tag:yaml.org,2002:int> abc",
    "!<tag:example.com,2000:app/foo> x",
]


@pytest.mark.parametrize("parser", ["libyaml", "pure-python"])
@pytest.mark.parametrize("tagged", TAGGED)
def test_explicit_tags_are_refused_with_one_line_whatever_their_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parser: str, tagged: str
) -> None:
    module = spec_file if parser == "libyaml" else _pure_python_spec_file(monkeypatch)
    path = write(tmp_path, f"model_bucket_name: models\nmax_model_len: {tagged}\n")
    with pytest.raises(module.SpecFileError) as raised:
        module.load(path)
    assert raised.value.line == 2
    assert raised.value.reason.startswith("explicit YAML tag !")
    assert "is not accepted" in raised.value.reason
    assert len(str(raised.value).splitlines()) == 1


def test_a_tag_on_a_key_is_refused_too(tmp_path: Path) -> None:
    error = refused(write(tmp_path, "!!str model_bucket_name: models\n"))
    assert error.reason.startswith("explicit YAML tag !!str is not accepted")


# Issue 17, item 9: the plain scalars YAML 1.1 and YAML 1.2 read differently.

DISAGREEING = [
    ("012", "012 is the number 10 in YAML 1.1 but the number 12 in YAML 1.2; write 12"),
    ("0o12", "0o12 is the text '0o12' in YAML 1.1 but the number 10 in YAML 1.2; write 10"),
    ("1:30", "1:30 is the number 90 in YAML 1.1 but the text '1:30' in YAML 1.2; write 90"),
    ("0b101", "0b101 is the number 5 in YAML 1.1 but the text '0b101' in YAML 1.2; write 5"),
    ("1_000", "1_000 is the number 1000 in YAML 1.1 but the text '1_000' in YAML 1.2"),
    ("1e3", "1e3 is the text '1e3' in YAML 1.1 but the number 1000.0 in YAML 1.2"),
    ("yes", "yes is true in YAML 1.1 but the text 'yes' in YAML 1.2; write true, or 'yes'"),
    ("off", "off is false in YAML 1.1 but the text 'off' in YAML 1.2; write false"),
    ("y", "y is true in YAML 1.1 but the text 'y' in YAML 1.2"),
    ("N", "N is false in YAML 1.1 but the text 'N' in YAML 1.2"),
    ("2001-12-14", "2001-12-14 is a date in YAML 1.1 but the text '2001-12-14' in YAML 1.2"),
]


@pytest.mark.parametrize("parser", ["libyaml", "pure-python"])
@pytest.mark.parametrize(("plain", "reason"), DISAGREEING)
def test_plain_scalars_the_yaml_versions_read_differently_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parser: str, plain: str, reason: str
) -> None:
    module = spec_file if parser == "libyaml" else _pure_python_spec_file(monkeypatch)
    path = write(tmp_path, f"limits:\n  max_model_len: {plain}\n")
    with pytest.raises(module.SpecFileError) as raised:
        module.load(path)
    assert raised.value.reason.startswith(reason)
    assert raised.value.line == 2


def test_a_hexadecimal_integer_is_refused_with_its_decimal_value(tmp_path: Path) -> None:
    error = refused(write(tmp_path, "max_model_len: 0x2000\n"))
    assert error.reason == "0x2000 is hexadecimal; write spec integers in decimal (8192)"


def test_plain_scalars_both_versions_read_alike_keep_their_meaning(tmp_path: Path) -> None:
    text = (
        "a: 8192\nb: -1\nc: +8\nd: 0\ne: 0.9\nf: .5\ng: true\nh: False\ni: null\nj: ~\nk:\n"
        "l: .inf\nm: text\nquoted: '012'\no: \"yes\"\np: models/llama-3-8b/\nq: 1.0e+3\nr: 00\n"
    )
    assert spec_file.load(write(tmp_path, text)) == {
        "a": 8192,
        "b": -1,
        "c": 8,
        "d": 0,
        "e": 0.9,
        "f": 0.5,
        "g": True,
        "h": False,
        "i": None,
        "j": None,
        "k": None,
        "l": float("inf"),
        "m": "text",
        "quoted": "012",
        "o": "yes",
        "p": "models/llama-3-8b/",
        "q": 1000.0,
        "r": 0,
    }


def test_a_merge_key_as_a_value_is_text(tmp_path: Path) -> None:
    assert spec_file.load(write(tmp_path, "a: <<\n")) == {"a": "<<"}


# The data is built from the parser's events in the pass that checks them: what it builds is
# what PyYAML's safe loader builds from every file both accept.

ACCEPTED = [
    pytest.param(REFERENCE_TEXT, id="reference"),
    *(
        pytest.param(path.read_text(), id=path.name)
        for path in sorted((REFERENCE_PLATFORM.parent / "examples").glob("*.yaml"))
    ),
    pytest.param("", id="empty"),
    pytest.param("8192\n", id="a-scalar"),
    pytest.param("[1, [2, [3, {a: b}]], {}]\n", id="flow"),
    pytest.param("a: |\n  two\n  lines\nb: >\n  folded\n  text\n", id="block-scalars"),
    pytest.param("? complex\n: key\n'quoted key': 1\n\"1\": one\n1: number\n", id="keys"),
    pytest.param(
        "base: &b {p: 1, q: 2}\nother: &o {q: 3, r: 4}\n"
        "one: {<<: *b, q: 5}\nmany: {<<: [*b, *o], s: 0}\nnested: {<<: {<<: *o, t: 1}}\n",
        id="merge-keys",
    ),
    pytest.param("a: &x [1, 2]\nb: *x\nc: &s text\nd: *s\n", id="aliases"),
    pytest.param("---\na: 1\n...\n", id="explicit-document"),
]


@pytest.mark.parametrize("parser", ["libyaml", "pure-python"])
@pytest.mark.parametrize("content", ACCEPTED)
def test_what_is_built_is_what_the_safe_loader_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parser: str, content: str
) -> None:
    module = spec_file if parser == "libyaml" else _pure_python_spec_file(monkeypatch)
    built = module.load(write(tmp_path, content))
    assert built == yaml.safe_load(content)
    # Keys in the same order too (repr shows it; equality of dicts does not).
    assert repr(built) == repr(yaml.safe_load(content))


def test_an_alias_shares_its_anchored_value(tmp_path: Path) -> None:
    data = spec_file.load(write(tmp_path, "a: &x {k: [1]}\nb: *x\n"))
    assert data["a"] is data["b"]


MALFORMED = [
    pytest.param(
        "a: &x 1\nb: &x 2\n", 2, "anchor &x is defined twice, first at line 1", id="anchor"
    ),
    pytest.param("? [a, b]\n: 1\n", 1, "a list as a key; keys are text", id="list-key"),
    pytest.param(
        "a: {<<: 1}\n", 1, "a merge key (<<) takes a mapping or a list", id="merge-scalar"
    ),
    pytest.param("a: {<<: [{x: 1}, 2]}\n", 1, "a merge key (<<) takes a mapping", id="merge-list"),
    pytest.param("a: {x: 1, <<: {x: 2}, x: 3}\n", 1, "duplicate key 'x'", id="merge-duplicate"),
]


@pytest.mark.parametrize("parser", ["libyaml", "pure-python"])
@pytest.mark.parametrize(("content", "line", "reason"), MALFORMED)
def test_malformed_mappings_and_anchors_fail_with_a_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    parser: str,
    content: str,
    line: int,
    reason: str,
) -> None:
    module = spec_file if parser == "libyaml" else _pure_python_spec_file(monkeypatch)
    with pytest.raises(module.SpecFileError) as raised:
        module.load(write(tmp_path, content))
    assert reason in raised.value.reason
    assert raised.value.line == line
    # PyYAML refuses each of them too.
    with pytest.raises(yaml.YAMLError):
        yaml.load(content, Loader=_DuplicateKeyRefusingLoader)


class _DuplicateKeyRefusingLoader(yaml.SafeLoader):
    """PyYAML's safe loader, failing on a key given twice as the spec reader does."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[object, object]:
        keys = [
            k.value for k, _ in node.value if isinstance(k, yaml.ScalarNode) and k.value != "<<"
        ]
        if len(keys) != len(set(keys)):
            raise yaml.constructor.ConstructorError(None, None, "duplicate key", node.start_mark)
        built: dict[object, object] = super().construct_mapping(node, deep=deep)
        return built
