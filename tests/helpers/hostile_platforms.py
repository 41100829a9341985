"""Hostile platform files, written on demand: every way a platform file can be wrong or odd.

:func:`write_hostile_platforms` writes ``count`` files into a directory and returns their
paths, in the same order with the same content on every run (random choices are seeded).
They start from the reference platform (``deployments.yaml``) and break it: wrong types, field
typos, huge and negative values, deep nesting, explicit YAML tags, YAML 1.1 forms, anchors that
expand without bound, duplicate keys, bytes that are not UTF-8 or not text at all, and things
that are not regular files (FIFOs, directories, symbolic links, device files). Every one must
be refused with one line, or accepted; none may hang, crash or take long.

The cases are generated rather than checked in so that they follow the reference file as it
changes, and so that a larger corpus is one argument away.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import random
import signal
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.platforms import REFERENCE_PLATFORM

# A file's content, or a function that makes the path into something that is not plain content.
Maker = Callable[[Path], None]

# Field paths of the reference file that mutations aim at: every kind of field it has.
_FIELDS: tuple[tuple[str | int, ...], ...] = (
    ("cluster_name",),
    ("region",),
    ("account_id",),
    ("model_bucket_name",),
    ("endpoint",),
    ("endpoint", "scheme"),
    ("endpoint", "routing"),
    ("endpoint", "authentication"),
    ("node_pools",),
    ("node_pools", 0),
    ("node_pools", 0, "name"),
    ("node_pools", 0, "instance_types"),
    ("node_pools", 1, "instance_types", 0),
    ("node_pools", 1, "min_size"),
    ("node_pools", 2, "max_size"),
    ("deployments",),
    ("deployments", 0),
    ("deployments", 0, "name"),
    ("deployments", 0, "model"),
    ("deployments", 0, "instance_type"),
    ("deployments", 0, "engine"),
    ("deployments", 0, "tensor_parallel_size"),
    ("deployments", 0, "limits"),
    ("deployments", 0, "limits", "max_model_len"),
    ("deployments", 1, "limits", "max_num_seqs"),
    ("deployments", 1, "scaling", "min_replicas"),
    ("deployments", 2, "scaling", "max_replicas"),
    ("deployments", 1, "weights"),
    ("deployments", 1, "weights", "prefix"),
    ("deployments", 2, "weights", "loader"),
    ("deployments", 0, "neuron"),
    ("deployments", 0, "neuron", "compiled_artifacts_prefix"),
    ("deployments", 0, "neuron", "sequence_buckets"),
    ("deployments", 0, "neuron", "sequence_buckets", 2),
)

# Values of the wrong type, out of range or of absurd size, as Python data (dumped as YAML).
_VALUES: tuple[object, ...] = (
    None,
    True,
    0,
    -1,
    2**63 - 1,
    2**64,
    -(2**63),
    1.5,
    float("inf"),
    float("nan"),
    "",
    " ",
    "x" * 5000,
    "\u00e9\u4e2d\U0001f600",
    "\x00",
    "../../etc/passwd",
    "s3://bucket/key",
    [],
    [None],
    {},
    {"tensor_parallel_size": 8},
    [[[[]]]],
)

# Scalars written as YAML text, where the reader's tag resolution decides what they mean.
_YAML_FORMS: tuple[str, ...] = (
    "012",
    "0o12",
    "0x10",
    "0b101",
    "1:30",
    "1_000",
    "+8",
    "8.0",
    "1e3",
    ".inf",
    "-.inf",
    ".nan",
    "yes",
    "no",
    "on",
    "off",
    "y",
    "n",
    "~",
    "Null",
    "TRUE",
    "2001-12-14",
    "2001-12-14t21:59:43.10-05:00",
    "=",
    "<<",
)

# Explicit tags with values they do and do not fit.
_TAGGED: tuple[str, ...] = (
    "!!int abc",
    '!!int ""',
    "!!int 0b102",
    "!!int 0x",
    "!!int 0xZZ",
    "!!int 08",
    "!!int 1:",
    "!!int :30",
    "!!int 1:99",
    "!!int _",
    "!!int -",
    "!!int 8",
    '!!float ""',
    "!!float abc",
    "!!float 1:x",
    "!!float .",
    "!!float 8",
    "!!bool maybe",
    '!!bool ""',
    "!!bool yes",
    "!!null x",
    "!!null",
    "!!timestamp 2001-13-45",
    "!!timestamp 2001-02-30",
    "!!timestamp 1",
    "!!timestamp 2001-12-14 25:61:61",
    "!!timestamp 2001-12-14T21:59:43+99:99",
    "!!timestamp 2001-12-14",
    "!!binary abc",
    "!!binary ===",
    "!!binary aGVsbG8=",
    '!!binary "\u00e9"',
    "!!str 8192",
    "!!str",
    "!!seq abc",
    "!!map abc",
    "!!omap abc",
    "!!omap [a, b]",
    "!!omap [{a: 1, b: 2}]",
    "!!omap [{a: 1}, {a: 2}]",
    "!!pairs abc",
    "!!pairs [a]",
    "!!pairs [{a: 1, b: 2}]",
    "!!set abc",
    "!!set [a, b]",
    "!!set {a: 1}",
    "!!set {a, b}",
    "!!merge x",
    "!!value x",
    "!!python/object:os.system echo",
    "!!python/name:os.system",
    "!foo bar",
    "!foo [1]",
    "!foo {a: 1}",
    "!<tag:yaml.org,2002:int> abc",
    "!<tag:example.com,2000:app/foo> x",
    "!<!> x",
    "!!int [1, 2]",
    "!!int {a: 1}",
    "!!str [1]",
    "!!str {a: 1}",
    "!!seq {a: 1}",
    "!!map [1]",
    "!!bool [1]",
    "!!float {a: 1}",
    "!!timestamp [1]",
    "!!binary [1]",
    "!!null [1]",
    "!!merge [1]",
)

# Misspellings of real fields, at the places they belong.
_TYPOS: tuple[tuple[tuple[str | int, ...], str, str], ...] = (
    (("deployments", 0), "tensor_parallel_size", "tensor_paralel_size"),
    (("deployments", 0), "instance_type", "instance_types"),
    (("deployments", 1), "limits", "limit"),
    (("deployments", 1, "limits"), "max_model_len", "max_model_length"),
    (("deployments", 2, "scaling"), "max_replicas", "maxReplicas"),
    (("deployments", 2, "weights"), "loader", "loder"),
    (("deployments", 0, "neuron"), "sequence_buckets", "sequence_bucket"),
    (("node_pools", 1), "instance_types", "instance_type"),
    (("node_pools", 2), "max_size", "maxsize"),
    ((), "model_bucket_name", "model_bucket"),
    ((), "node_pools", "nodepools"),
    ((), "deployments", "deployment"),
    ((), "region", "Region"),
)


# libyaml's emitter where PyYAML has it: the corpus dumps thousands of documents.
_Dumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


@functools.cache
def _reference_text() -> str:
    return REFERENCE_PLATFORM.read_text()


@functools.cache
def _parsed_reference() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(_reference_text())
    return data


def _reference_data() -> dict[str, Any]:
    """A fresh copy of the reference platform's data, free to edit."""
    return copy.deepcopy(_parsed_reference())


def _dump(data: object) -> str:
    text: str = yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True)
    return text


def _set(data: Any, path: tuple[str | int, ...], value: object) -> Any:
    """``data`` with the node at ``path`` set to ``value`` (the root when ``path`` is empty)."""
    if not path:
        return value
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return data


_MARKER = "HOSTILE_VALUE_MARKER"


def _placeholder_text(path: tuple[str | int, ...]) -> tuple[str, str]:
    """The reference dumped with a unique marker at ``path``, and the marker's quoted form.

    Replacing the quoted marker by raw YAML text puts that text, unparsed, where the field was.
    """
    return _dump(_set(_reference_data(), path, _MARKER)), _MARKER


def _raw_at(path: tuple[str | int, ...], text: str) -> str:
    dumped, marker = _placeholder_text(path)
    return dumped.replace(marker, text, 1)


def _rename(parent: tuple[str | int, ...], old: str, new: str) -> str:
    data = _reference_data()
    target: Any = data
    for key in parent:
        target = target[key]
    target[new] = target.pop(old)
    return _dump(data)


def _laughs(levels: int, width: int) -> str:
    lines = ["bomb:", "  l0: &l0 [" + ", ".join(["lol"] * width) + "]"]
    for level in range(1, levels):
        lines.append(f"  l{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * width) + "]")
    return _reference_text() + "\n".join(lines) + "\n"


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _directory(path: Path) -> None:
    path.mkdir()


def _symlink_to(target: str | Path) -> Maker:
    def make(path: Path) -> None:
        path.symlink_to(target)

    return make


def _loop(path: Path) -> None:
    path.symlink_to(path.name)


def _fifo_behind_link(path: Path) -> None:
    fifo = path.with_name(path.name + ".fifo")
    os.mkfifo(fifo)
    path.symlink_to(fifo.name)


def _unreadable(path: Path) -> None:
    path.write_text(_reference_text())
    path.chmod(0)


def _system_file(name: str, fallback: str) -> bytes:
    """A system file's bytes, or text shaped like it where the system has none."""
    source = Path(name)
    try:
        if stat.S_ISREG(source.stat().st_mode):
            return source.read_bytes()[: 64 * 1024]
    except OSError:
        pass
    return fallback.encode()


_PASSWD = "root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n"
_HOSTS = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"


def _fixed_cases() -> Iterator[tuple[str, str | bytes | Maker]]:
    """Cases that are not one field set to one value: whole-file and structural hostility."""
    reference = _reference_text()
    yield "empty", ""
    yield "whitespace", " \n\t\n"
    yield "comment-only", "# nothing here\n"
    yield "null-document", "~\n"
    yield "scalar-document", "hello\n"
    yield "integer-document", "42\n"
    yield "list-document", "- a\n- b\n"
    yield "json-array", '["deployments"]'
    yield "json-object", '{"model_bucket_name": "b", "node_pools": []}'
    yield "two-documents", reference + "---\n" + reference
    yield "document-end-only", "...\n"
    yield "tab-indented", reference.replace("  - name: system", "\t- name: system")
    yield "unclosed-flow", "node_pools: [a, b\n"
    yield "unclosed-quote", 'model_bucket_name: "abc\n'
    yield "bad-indentation", "a:\n  b: 1\n c: 2\n"
    yield "duplicate-top-key", reference + "deployments: []\n"
    yield (
        "duplicate-nested-key",
        reference.replace(
            "    tensor_parallel_size: 8\n",
            "    tensor_parallel_size: 8\n    tensor_parallel_size: 4\n",
        ),
    )
    yield "duplicate-via-quoting", reference + '"region": us-west-2\n'
    yield "duplicate-via-merge", reference + "x: &m {a: 1}\ny: {<<: *m, <<: *m}\n"
    yield "merge-of-scalar", reference + "x: {<<: 1}\n"
    yield "merge-of-list-of-scalars", reference + "x: {<<: [1, 2]}\n"
    yield (
        "merge-into-deployment",
        reference.replace(
            "  - name: mistral-7b-g6e\n",
            "  - name: mistral-7b-g6e\n    <<: {tensor_parallel_size: 8}\n",
        ),
    )
    yield "complex-key", reference + "? [a, b]\n: c\n"
    yield "mapping-key", reference + "? {a: 1}\n: c\n"
    yield "null-key", reference + "~: c\n"
    yield "integer-key", reference + "1: c\n"
    yield "boolean-key", reference + "yes: c\n"
    yield "recursive-alias", "a: &a [*a]\n"
    yield "recursive-alias-map", "a: &a {b: *a}\n"
    yield "undefined-alias", reference + "x: *nowhere\n"
    yield "laughs-9x10", _laughs(9, 10)
    yield "laughs-6x20", _laughs(6, 20)
    yield "laughs-30x2", _laughs(30, 2)
    yield (
        "alias-deployments-repeated",
        reference.replace("deployments:\n", "deployments: &d\n", 1) + "again: *d\n",
    )
    yield "deep-flow-nesting", "a: " + "[" * 5000 + "]" * 5000 + "\n"
    yield (
        "deep-block-nesting",
        "".join("  " * i + f"k{i}:\n" for i in range(200)) + "  " * 200 + "v\n",
    )
    yield "deep-map-nesting", "a: " + "{b: " * 3000 + "1" + "}" * 3000 + "\n"
    yield "wide-mapping", "".join(f"k{i}: {i}\n" for i in range(20000))
    yield "many-unknown-keys", _reference_text() + "".join(f"extra{i}: {i}\n" for i in range(9000))
    yield (
        "many-misspelt-keys",
        _reference_text() + "".join(f"model_bucket_nam{i}: {i}\n" for i in range(9000)),
    )
    yield "long-line", "model_bucket_name: " + "a" * 400_000 + "\n"
    yield "thousands-of-digits", reference.replace("max_size: 3", "max_size: " + "9" * 5000)
    yield "huge-float", reference.replace("max_size: 3", "max_size: 1e309")
    yield "huge-hex", reference.replace("max_size: 3", "max_size: 0x" + "f" * 90)
    yield "too-large", reference + "#" * (600 * 1024) + "\n"
    yield (
        "many-deployments",
        reference
        + "".join(
            f"  - {{name: d{i}, model: mistral-7b, instance_type: g6e.2xlarge, engine: vllm, "
            f"tensor_parallel_size: 1, weights: {{prefix: m{i}/, loader: runai_streamer}}}}\n"
            for i in range(400)
        ),
    )
    yield "not-utf-8", b"model_bucket_name: caf\xe9\n"
    yield "latin-1-reference", reference.replace("eks-inference", "\u00e9ks").encode("latin-1")
    yield "utf-16", reference.encode("utf-16")
    yield "utf-8-bom", "\ufeff" + reference
    yield "nul-bytes", reference.replace("region:", "reg\x00ion:")
    yield "control-characters", reference.replace("us-east-1", "us-\x1b[31meast-1")
    yield "bidi-override", reference.replace("system", "sys\u202etem")
    yield "lone-surrogate-escape", reference + 'x: "\\ud800"\n'
    yield "crlf", reference.replace("\n", "\r\n")
    yield "cr-only", reference.replace("\n", "\r")
    yield "random-binary", random.Random(7).randbytes(4096)
    yield "gzip-magic", b"\x1f\x8b\x08\x00" + random.Random(8).randbytes(512)
    yield "elf-magic", b"\x7fELF\x02\x01\x01" + bytes(200)
    yield "png-magic", b"\x89PNG\r\n\x1a\n" + random.Random(9).randbytes(256)
    yield "all-zero-bytes", bytes(2048)
    yield "passwd", _system_file("/etc/passwd", _PASSWD)
    yield "hosts", _system_file("/etc/hosts", _HOSTS)
    yield "os-release", _system_file("/etc/os-release", 'NAME="Linux"\nID=linux\n')
    yield "shell-script", "#!/bin/sh\necho hello\nexit 0\n"
    yield "ini-file", "[default]\nregion = us-east-1\n"
    yield "json-schema-like", '{"$schema": "x", "properties": {}}'
    yield "k8s-manifest", "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n"
    yield "fifo", _fifo
    yield "fifo-behind-symlink", _fifo_behind_link
    yield "directory", _directory
    yield "symlink-to-reference", _symlink_to(REFERENCE_PLATFORM)
    yield "dangling-symlink", _symlink_to("does-not-exist.yaml")
    yield "symlink-loop", _loop
    yield "symlink-to-directory", _symlink_to("/")
    if Path("/dev/null").exists():
        yield "dev-null", _symlink_to("/dev/null")
    if Path("/dev/zero").exists():
        yield "dev-zero", _symlink_to("/dev/zero")
    if Path("/dev/urandom").exists():
        yield "dev-urandom", _symlink_to("/dev/urandom")
    if Path("/dev/tty").exists():
        yield "dev-tty", _symlink_to("/dev/tty")
    if Path("/proc/self/status").exists():
        yield "proc-file", _symlink_to("/proc/self/status")
    if os.geteuid() != 0:
        # Root reads any file whatever its mode, so the case means nothing there.
        yield "unreadable", _unreadable
    for parent, old, new in _TYPOS:
        yield f"typo-{new}", _rename(parent, old, new)
    yield "unknown-top-field", reference + "replicas: 3\n"
    yield (
        "unknown-deployment-field",
        reference.replace("    engine: vllm\n", "    engine: vllm\n    gpus: 1\n"),
    )
    yield (
        "missing-bucket",
        reference.replace("model_bucket_name: eks-inference-models-example\n", ""),
    )
    yield "no-node-pools", _dump({**_reference_data(), "node_pools": []})
    yield "many-node-pools", _dump(_with_node_pools(2500))
    # Rules sizing a degree the instance lacks, or reading a loader's options that failed.
    yield (
        "fsx-field-fails-on-kserve",
        _with_deployment(
            1,
            engine="kserve",
            weights={"prefix": "m/", "loader": "fsx", "fsx": {"storage_capacity_gib": 1300}},
        ),
    )
    yield (
        "kserve-degree-beyond-gpus-scaling-retyped",
        _with_deployment(1, engine="kserve", tensor_parallel_size=3, scaling={"x": 1}),
    )
    yield (
        "kv-tier-degree-beyond-gpus",
        _with_deployment(1, tensor_parallel_size=3, kv_cache={"offload": "cpu", "cpu_gib": 8}),
    )
    yield (
        "duplicate-deployments",
        _dump({**_reference_data(), "deployments": _reference_data()["deployments"] * 2}),
    )


def _with_node_pools(count: int) -> dict[str, Any]:
    """The reference platform with ``count`` more CPU pools: thousands fit every file limit."""
    data = _reference_data()
    pools = [{"name": f"cpu-{i}", "instance_types": ["m6i.xlarge"]} for i in range(count)]
    return {**data, "node_pools": [*data["node_pools"], *pools]}


def _with_deployment(index: int, **fields: object) -> str:
    """The reference platform with fields of its ``index``-th deployment set."""
    data = _reference_data()
    data["deployments"][index].update(fields)
    return _dump(data)


def _matrix_cases() -> list[tuple[str, Callable[[], str]]]:
    """Each field of :data:`_FIELDS` with each value, YAML form and tag, made when asked for.

    The matrix has thousands of cases; a corpus takes a sample, so none is built in advance.
    """
    cases: list[tuple[str, Callable[[], str]]] = []
    for path in _FIELDS:
        name = ".".join(str(p) for p in path)
        for raw in _YAML_FORMS + _TAGGED:
            kind = "tag" if raw.startswith("!") else "form"
            cases.append((f"{name}-{kind}-{raw}", functools.partial(_raw_at, path, raw)))
        for index, value in enumerate(_VALUES):
            cases.append((f"{name}-value-{index}", functools.partial(_dump_with, path, value)))
    return cases


def _dump_with(path: tuple[str | int, ...], value: object) -> str:
    return _dump(_set(_reference_data(), path, value))


def _random_cases() -> Iterator[tuple[str, str | bytes | Maker]]:
    """Without end: several fields broken at once, from a seeded generator."""
    chooser = random.Random(17)
    serial = 0
    while True:
        serial += 1
        data = _set(_reference_data(), chooser.choice(_FIELDS), _MARKER)
        replacement = chooser.choice(_TAGGED + _YAML_FORMS)
        for _ in range(chooser.randint(1, 3)):
            path = chooser.choice(_FIELDS)
            try:
                _set(data, path, chooser.choice(_VALUES))
            except (KeyError, IndexError, TypeError):
                continue
        yield f"random-{serial}", _dump(data).replace(_MARKER, replacement, 1)


def _interleaved() -> Iterator[tuple[str, str | bytes | Maker]]:
    """Fixed cases first, then the matrix sampled evenly, then the random ones.

    The matrix has thousands of cases, field by field; taking every seventh first (seven is
    prime to the number of values per field) gives a small corpus every field and every kind of
    value.
    """
    yield from _fixed_cases()
    matrix = _matrix_cases()
    stride = 7
    for start in range(stride):
        for name, make in matrix[start::stride]:
            yield name, make()
    yield from _random_cases()


def _file_name(index: int, name: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:60]
    return f"{index:04d}-{safe}.yaml"


def write_hostile_platforms(directory: Path, count: int = 300) -> list[Path]:
    """Write ``count`` hostile platform files into ``directory``; return their paths in order.

    The same ``count`` gives the same names and contents on every run. Some paths are not
    regular files (a FIFO, a directory, symbolic links), which is the point of them; delete
    ``directory`` with ``shutil.rmtree``, which does not follow links.
    """
    directory.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    for index, (name, content) in enumerate(_interleaved()):
        if index >= count:
            break
        path = directory / _file_name(index, name)
        if isinstance(content, bytes):
            path.write_bytes(content)
        elif isinstance(content, str):
            path.write_bytes(content.encode("utf-8", "surrogatepass"))
        else:
            content(path)
        paths.append(path)
    return paths


@dataclass(frozen=True)
class Measured:
    """How one command run as its own process ended, and what it cost, by the kernel's count."""

    code: int
    stderr: str
    cpu_seconds: float
    peak_mib: float


# Forks the command from this small process and reports the kernel's account of it (wait4),
# so that the peak memory is the command's own. A command started straight from the test
# process would inherit the test process's peak: Linux carries a process's peak resident set
# across exec, and pytest workers that synthesized apps are larger than the budget.
_LAUNCHER = """
import json, os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as report:
    json.dump([os.waitstatus_to_exitcode(status), usage.ru_utime + usage.ru_stime,
               usage.ru_maxrss], report)
"""


def run_measured(
    args: list[str], *, cwd: Path, hang_seconds: float, env: dict[str, str] | None = None
) -> Measured:
    """Run ``args`` (the first an executable's path) in ``cwd`` with no input; return its exit
    code, stderr, CPU seconds and peak memory. A run still going after ``hang_seconds`` is
    killed and fails the test."""
    stderr, report = cwd / "stderr.txt", cwd / "usage.json"
    report.unlink(missing_ok=True)
    # A file rather than a pipe, so that however much a broken run prints, it cannot block.
    with (
        stderr.open("w") as sink,
        subprocess.Popen(
            [sys.executable, "-c", _LAUNCHER, str(report), *args],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=sink,
            start_new_session=True,
        ) as launcher,
    ):
        try:
            launcher.wait(timeout=hang_seconds)
        except subprocess.TimeoutExpired:
            os.killpg(launcher.pid, signal.SIGKILL)
            pytest.fail(f"{args!r} still running after {hang_seconds} s")
    code, cpu_seconds, peak_kib = json.loads(report.read_text())
    return Measured(code, stderr.read_text(errors="replace"), cpu_seconds, peak_kib / 1024)
