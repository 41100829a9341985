"""``upload`` against the real S3 emulator when things go wrong (issue 13, items 1-5).

Unreadable and linked entries, a file that changes while it is sent, multipart uploads left
open by a killed or terminated run, an endpoint that accepts connections and never answers,
and keys S3 cannot take. Tests run as root here, so an unreadable directory is simulated by
making ``os.scandir`` raise the ``PermissionError`` a non-root user would get.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from rich.progress import Progress
from typer.testing import Result

from eks_inference.cli.progress import STALL_AFTER_S, ByteProgress, StallColumn
from eks_inference.ops.aws.deadlines import TIMEOUT_VARIABLE
from tests.helpers.errors import one_line_error
from tests.helpers.platforms import REPO

from .conftest import BIG, BUCKET, MIB, PART_SIZE, PREFIX, SMALL, URI, ApiCalls, upload

Cli = Callable[..., Result]
# Three parts of 5, 5 and 1 MiB.
WRITES = (
    "PutObject",
    "CreateMultipartUpload",
    "UploadPart",
    "CompleteMultipartUpload",
    "DeleteObjects",
)


def _remote(s3: Any, prefix: str = PREFIX) -> dict[str, bytes]:
    response = s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix)
    return {
        item["Key"].removeprefix(prefix): s3.get_object(Bucket=BUCKET, Key=item["Key"])[
            "Body"
        ].read()
        for item in response.get("Contents", [])
    }


def _open_uploads(s3: Any, prefix: str = PREFIX) -> list[str]:
    uploads = s3.list_multipart_uploads(Bucket=BUCKET, Prefix=prefix).get("Uploads", [])
    return [u["Key"] for u in uploads]


# Item 1: unreadable entries and links.


def test_an_unreadable_directory_fails_the_run_before_anything_changes(
    cli: Cli,
    s3: Any,
    bucket: str,
    model_dir: Path,
    api_calls: ApiCalls,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert upload(cli, model_dir).exit_code == 0
    before = _remote(s3)
    assert "original/consolidated.safetensors" in before

    real_scandir = os.scandir

    def scandir(path: Any = ".") -> Any:
        if Path(path).name == "original":
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    api_calls.clear()
    # With --delete, a skipped directory would have cost the bucket its copy.
    line = one_line_error(upload(cli, model_dir, "--delete"), 2)
    assert "'original/' cannot be read (Permission denied)" in line
    assert f"cannot upload {model_dir} as it is, nothing was sent; 1 problem:" in line
    assert [name for name, _ in api_calls.calls if name in WRITES] == []
    # The objects and the manifest of the complete upload are untouched.
    assert _remote(s3) == before


def test_links_that_leave_the_directory_are_refused_one_message_each(
    cli: Cli, s3: Any, bucket: str, model_dir: Path, tmp_path: Path, api_calls: ApiCalls
) -> None:
    outside = tmp_path / "elsewhere"
    (outside / "tokenizer").mkdir(parents=True)
    (outside / "tokenizer" / "tokenizer.json").write_text("{}")
    (outside / "extra.safetensors").write_bytes(b"weights kept elsewhere")
    (model_dir / "extra.safetensors").symlink_to(outside / "extra.safetensors")
    (model_dir / "tokenizer").symlink_to(outside / "tokenizer", target_is_directory=True)
    (model_dir / "generation_config.json").symlink_to(model_dir / "no-such-file.json")
    (model_dir / "original" / "loop").symlink_to("..", target_is_directory=True)

    line = one_line_error(upload(cli, model_dir), 2)
    assert "nothing was sent; 4 problems: " in line
    assert f"'extra.safetensors' is a link to '{outside / 'extra.safetensors'}', outside" in line
    assert f"'tokenizer' is a link to '{outside / 'tokenizer'}', outside the directory" in line
    assert "'generation_config.json' is a link to " in line
    assert "which does not exist" in line
    assert "'original/loop' is a link to one of its own parents" in line
    assert "cp -rL" in line
    assert api_calls.calls == []
    assert _remote(s3) == {}


def test_links_inside_the_directory_are_uploaded_as_their_targets(
    cli: Cli, s3: Any, bucket: str, model_dir: Path
) -> None:
    (model_dir / "pytorch_model.safetensors").symlink_to(SMALL)
    (model_dir / "consolidated").symlink_to("original", target_is_directory=True)

    result = upload(cli, model_dir)
    assert result.exit_code == 0, result.stderr
    notes = [line for line in result.stderr.splitlines() if line.startswith("note: ")]
    assert len(notes) == 2
    assert "'consolidated' is a link to 'original' inside the directory" in notes[0]
    assert f"'pytorch_model.safetensors' is a link to '{SMALL}' inside" in notes[1]
    remote = _remote(s3)
    assert remote["pytorch_model.safetensors"] == (model_dir / SMALL).read_bytes()
    assert (
        remote["consolidated/consolidated.safetensors"]
        == remote["original/consolidated.safetensors"]
    )
    manifest = json.loads(remote["_manifest.json"])
    assert {f["key"] for f in manifest["files"]} == set(remote) - {"_manifest.json"}


def test_a_fifo_is_refused_instead_of_skipped_or_read_forever(
    cli: Cli, bucket: str, model_dir: Path
) -> None:
    os.mkfifo(model_dir / "original" / "pipe")
    line = one_line_error(upload(cli, model_dir), 2)
    assert "'original/pipe' is not a file or directory (a FIFO, socket or device)" in line


# Item 2: a file that changes while it is uploaded.


def _crc32(data: bytes) -> str:
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


def test_a_file_changed_mid_upload_leaves_no_object_and_no_manifest(
    cli: Cli,
    s3: Any,
    bucket: str,
    model_dir: Path,
    api_calls: ApiCalls,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    big = model_dir / BIG
    real_pread = os.pread
    reads: list[int] = []

    def pread(fd: int, size: int, offset: int) -> bytes:
        if os.readlink(f"/proc/self/fd/{fd}") == str(big):
            reads.append(offset)
            if len(reads) == 2:
                # Same size, other bytes, inside the part about to be read and sent.
                with big.open("r+b") as stream:
                    stream.seek(6 * MIB)
                    stream.write(b"rewritten by another process")
        return real_pread(fd, size, offset)

    monkeypatch.setattr(os, "pread", pread)
    line = one_line_error(upload(cli, model_dir, "--concurrency", "1"), 1)
    assert f"upload stopped ({BIG}: {big} changed while it was being read" in line
    remote = _remote(s3)
    assert BIG not in remote
    assert "_manifest.json" not in remote
    assert _open_uploads(s3) == []
    # Every object that is there holds exactly the bytes its sha256 metadata names, and each
    # upload asked S3 to check the bytes it received against the CRC-32 hashed locally.
    for key, body in remote.items():
        head = s3.head_object(Bucket=BUCKET, Key=PREFIX + key)
        assert head["Metadata"]["sha256"] == hashlib.sha256(body).hexdigest()
    puts = {p["Key"]: p for name, p in api_calls.calls if name == "PutObject"}
    config = (model_dir / "config.json").read_bytes()
    assert puts[PREFIX + "config.json"]["ChecksumCRC32"] == _crc32(config)
    assert api_calls.count("CompleteMultipartUpload") == 0

    monkeypatch.setattr(os, "pread", real_pread)
    result = upload(cli, model_dir)
    assert result.exit_code == 0, result.stderr
    remote = _remote(s3)
    assert remote[BIG] == big.read_bytes()
    listed = {f["key"]: f["sha256"] for f in json.loads(remote["_manifest.json"])["files"]}
    assert listed[BIG] == hashlib.sha256(big.read_bytes()).hexdigest()


# Item 3: multipart uploads left open by a killed or terminated run.

_SIGNAL_AT_SECOND_PART = """
import os, signal, sys, time
from eks_inference.ops.aws import clients as aws_clients
from eks_inference.cli.main import main

SIGNAL = getattr(signal, sys.argv[1])
sys.argv = ["eks-inference", *sys.argv[2:]]
real_connect = aws_clients.connect


def connect(profile=None):
    session = real_connect(profile)

    def send_signal(params, **_):
        if params["PartNumber"] == 2:
            os.kill(os.getpid(), SIGNAL)
            # The main thread takes the signal while this part waits.
            time.sleep(2)

    session.session.events.register("before-parameter-build.s3.UploadPart", send_signal)
    return session


aws_clients.connect = connect
main()
"""


def _run_signalled(signal_name: str, root: Path) -> subprocess.CompletedProcess[str]:
    """The CLI in its own process, sent ``signal_name`` while its multipart upload is open."""
    command = [sys.executable, "-c", _SIGNAL_AT_SECOND_PART, signal_name]
    command += ["upload", str(root), URI, *PART_SIZE, "--concurrency", "1"]
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        cwd=REPO,
    )


def test_a_rerun_aborts_the_multipart_upload_a_killed_run_left_open(
    cli: Cli, s3: Any, bucket: str, model_dir: Path, api_calls: ApiCalls
) -> None:
    killed = _run_signalled("SIGKILL", model_dir)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert _open_uploads(s3) == [PREFIX + BIG]
    s3.create_multipart_upload(Bucket=BUCKET, Key="models/other/shard.safetensors")

    result = upload(cli, model_dir)
    assert result.exit_code == 0, result.stderr
    assert f"aborted 1 multipart upload that an earlier run left open under {URI}" in (
        result.stderr
    )
    assert _open_uploads(s3) == []
    # Another prefix's upload is not this run's business.
    assert _open_uploads(s3, "models/other/") == ["models/other/shard.safetensors"]
    assert _remote(s3)[BIG] == (model_dir / BIG).read_bytes()


def test_sigterm_stops_like_ctrl_c_and_leaves_no_open_upload(
    s3: Any, bucket: str, model_dir: Path
) -> None:
    terminated = _run_signalled("SIGTERM", model_dir)
    assert terminated.returncode == 130, terminated.stderr
    assert terminated.stderr.strip().splitlines()[-1].startswith("error: interrupted;")
    assert "Traceback" not in terminated.stderr
    assert _open_uploads(s3) == []
    assert "_manifest.json" not in _remote(s3)


# Item 4: an endpoint that accepts connections and never answers.


def test_a_silent_endpoint_fails_in_bounded_time_with_one_line(
    aws_env: str, silent_endpoint: str, model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", silent_endpoint)
    monkeypatch.setenv(TIMEOUT_VARIABLE, "0.5")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")
    started = time.monotonic()
    completed = subprocess.run(
        [sys.executable, "-m", "eks_inference", "upload", str(model_dir), URI],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=REPO,
    )
    elapsed = time.monotonic() - started
    assert completed.returncode == 1, completed.stderr
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1, completed.stderr
    assert lines[0].startswith(f"error: cannot read bucket {BUCKET}: S3 at {silent_endpoint}")
    assert "did not answer within 0.5 s on any attempt" in lines[0]
    # Two attempts of 0.5 s, a backoff of at most 2 s, and the interpreter's start.
    assert elapsed < 15


def test_the_progress_bar_shows_a_stall() -> None:
    progress = Progress(StallColumn(), console=Console(file=io.StringIO()))
    advance = ByteProgress(progress).task("uploading", 100)
    task = progress.tasks[0]
    assert StallColumn().render(task).plain == ""
    advance(10)
    stalled_since = time.monotonic() - (STALL_AFTER_S + 37)
    progress.update(task.id, last_progress=stalled_since)
    assert (
        StallColumn().render(progress.tasks[0]).plain
        == f"no progress for {STALL_AFTER_S + 37:.0f} s"
    )


@pytest.mark.parametrize("value", ["0", "-1", "soon", "nan", "86400"])
def test_the_timeout_setting_is_checked(
    cli: Cli, aws_env: str, model_dir: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(TIMEOUT_VARIABLE, value)
    line = one_line_error(upload(cli, model_dir), 2)
    assert f"{TIMEOUT_VARIABLE}={value!r} must be a number of seconds" in line


@pytest.mark.parametrize(
    ("variable", "value"),
    [("AWS_MAX_ATTEMPTS", "abc"), ("AWS_MAX_ATTEMPTS", "0"), ("AWS_RETRY_MODE", "bogus")],
)
def test_retry_settings_botocore_rejects_are_bad_input(
    cli: Cli,
    aws_env: str,
    model_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
    value: str,
) -> None:
    # Retries follow the standard AWS settings now, so their mistakes must read as one line.
    monkeypatch.setenv(variable, value)
    line = one_line_error(upload(cli, model_dir), 2)
    assert "the AWS configuration is invalid (" in line
    assert "check AWS_MAX_ATTEMPTS, AWS_RETRY_MODE" in line


# Item 5: keys S3 cannot take, part sizes, the suggested URI.


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("s3://bucket-name/models/../x/", "has an empty path segment ('//') or a '.' or '..'"),
        ("s3://bucket-name/models/./x/", "has an empty path segment ('//') or a '.' or '..'"),
        ("s3://bucket-name/models/a\x07b/", "has a control character, '?', '#' or '\\'"),
        ("s3://bucket-name/models/x?versionId=1/", "has a control character, '?', '#' or '\\'"),
        ("s3://bucket-name/models/x#frag/", "has a control character, '?', '#' or '\\'"),
    ],
)
def test_unsafe_prefixes_are_refused(cli: Cli, model_dir: Path, uri: str, expected: str) -> None:
    assert expected in one_line_error(cli("upload", model_dir, uri), 2)


@pytest.mark.parametrize("name", ["tok\x1benizer.json", "what?.json", "notes#1.json", "a\\b.json"])
def test_file_names_that_cannot_be_keys_are_refused(
    cli: Cli, model_dir: Path, api_calls: ApiCalls, name: str
) -> None:
    (model_dir / "original" / name).write_text("{}")
    line = one_line_error(upload(cli, model_dir), 2)
    shown = repr("original/" + name)
    assert f"{shown} has a control character, '?', '#' or '\\' in its name, refused" in line
    assert api_calls.calls == []


def test_keys_longer_than_s3_allows_are_refused(cli: Cli, aws_env: str, model_dir: Path) -> None:
    deep = model_dir / "original"
    for _ in range(5):
        deep = deep / ("d" * 200)
    deep.mkdir(parents=True)
    (deep / "tokenizer.json").write_text("{}")
    line = one_line_error(upload(cli, model_dir), 2)
    assert f"1 key under {URI} would be longer than S3's 1024 bytes" in line


@pytest.mark.parametrize("part_size", ["5121", "1000000"])
def test_part_size_is_capped_at_s3s_largest_part(
    cli: Cli, aws_env: str, model_dir: Path, part_size: str
) -> None:
    line = one_line_error(cli("upload", model_dir, URI, "--part-size", part_size), 2)
    assert "--part-size must be at least 5 MiB and at most 5120 MiB" in line


@pytest.mark.parametrize("uri", ["s3://models", "s3://models/"])
def test_the_suggested_uri_does_not_double_the_prefix(cli: Cli, model_dir: Path, uri: str) -> None:
    line = one_line_error(cli("upload", model_dir, uri), 2)
    assert "e.g. s3://models/MODEL/" in line
    assert "models/models/" not in line
