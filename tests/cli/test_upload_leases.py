"""``upload``'s lease against overlapping prefixes, hostile lock objects, deadlines and signals.

An upload to ``models/a/`` sees every object of an upload to ``models/a/b/`` as one of its own:
it would delete them with ``--delete`` and abort the inner run's multipart uploads as stale.
So neither may run while the other holds its lease, and the lock object of a prefix inside
the one being uploaded is never taken for an object of the upload. A lock object's content is
not trusted to hold a prefix for long, and a run stopped by its deadline or a signal still
cleans up after itself and says in one line what it left. Runs use the real S3 emulator on
127.0.0.1, in two processes at once where two runs race.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError  # type: ignore[import-untyped]
from typer.testing import Result

from eks_inference.ops.aws.deadlines import DEADLINE_VARIABLE
from eks_inference.ops.upload import lease as upload_lease
from eks_inference.ops.upload.lease import LEASE_S, LOCK_SUFFIX
from tests.helpers.errors import one_line_error
from tests.helpers.platforms import REPO

from .conftest import BUCKET, PART_SIZE, ApiCalls
from .test_upload_integrity import (
    _HOOKED_RUN,
    ELSEWHERE,
    _hooked,
    _lease_record,
    _release,
    _run,
)

Cli = Callable[..., Result]
OUTER = "models/a/"
INNER = "models/a/b/"


def _uri(prefix: str) -> str:
    return f"s3://{BUCKET}/{prefix}"


def _keys(s3: Any, prefix: str) -> list[str]:
    response = s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix)
    return sorted(item["Key"] for item in response.get("Contents", []))


def _paused_run(model_dir: Path, prefix: str, reached: Path) -> subprocess.Popen[str]:
    """An upload of ``model_dir`` to ``prefix`` that holds its lease with a multipart upload
    open, held at its second part (``reached`` exists) until :func:`_finish` lets it go on."""
    run = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _HOOKED_RUN,
            "UploadPart",
            "part2",
            "hold",
            str(reached),
            "upload",
            str(model_dir),
            _uri(prefix),
            *PART_SIZE,
            "--concurrency",
            "1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    deadline = time.monotonic() + 60
    while not reached.exists():
        assert run.poll() is None, run.communicate()
        assert time.monotonic() < deadline, "the paused run never reached its second part"
        time.sleep(0.05)
    return run


def _finish(run: subprocess.Popen[str], reached: Path) -> tuple[str, str]:
    _release(reached)
    try:
        stdout, stderr = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 0, stderr
    return stdout, stderr


def test_an_upload_around_a_prefix_being_uploaded_is_refused_and_deletes_nothing(
    cli: Cli, s3: Any, bucket: str, model_dir: Path, tmp_path: Path
) -> None:
    reached = tmp_path / "inner-at-part-2"
    inner = _paused_run(model_dir, INNER, reached)
    try:
        outer = cli("upload", model_dir, _uri(OUTER), *PART_SIZE, "--overwrite", "--delete")
        line = one_line_error(outer, 1)
        assert (
            f"another upload holds the lease on {_uri(INNER)}, a prefix overlapping "
            f"{_uri(OUTER)} (host " in line
        )
        assert f", pid {inner.pid}, id " in line
        # Neither the inner run's lock and objects nor its open multipart upload were touched.
        # The outer run wrote nothing of its own either.
        assert set(_keys(s3, OUTER)) == {f"{OUTER}b{LOCK_SUFFIX}", *_keys(s3, INNER)}
        assert f"{INNER}config.json" in _keys(s3, INNER)
        assert len(s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads", [])) == 1
    finally:
        stdout, _ = _finish(inner, reached)
    assert "uploaded 4 files" in stdout
    assert f"{OUTER}b{LOCK_SUFFIX}" not in _keys(s3, "models/")


def test_an_upload_inside_a_prefix_being_uploaded_is_refused(
    cli: Cli, s3: Any, bucket: str, model_dir: Path, tmp_path: Path
) -> None:
    reached = tmp_path / "outer-at-part-2"
    outer = _paused_run(model_dir, OUTER, reached)
    try:
        inner = cli("upload", model_dir, _uri(INNER), *PART_SIZE)
        line = one_line_error(inner, 1)
        assert (
            f"another upload holds the lease on {_uri(OUTER)}, a prefix overlapping "
            f"{_uri(INNER)} (host " in line
        )
        assert f", pid {outer.pid}, id " in line
        assert not any(k.startswith(INNER) for k in _keys(s3, OUTER))
        # Its own lease was released.
        assert _keys(s3, f"{OUTER}b{LOCK_SUFFIX}") == []
    finally:
        stdout, _ = _finish(outer, reached)
    assert "uploaded 4 files" in stdout


def test_a_lock_around_the_prefix_that_cannot_be_read_does_not_stop_the_upload(
    cli: Cli, s3: Any, bucket: str, model_dir: Path, api_calls: ApiCalls
) -> None:
    # Credentials granted only models/a/b/ (and its own lock) may not read models/a's lock.
    denied = {f"models{LOCK_SUFFIX}", f"models/a{LOCK_SUFFIX}"}

    def deny(operation: str, params: dict[str, Any]) -> None:
        if operation == "GetObject" and params["Key"] in denied:
            raise ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, operation)

    api_calls.fail = deny
    result = cli("upload", model_dir, _uri(INNER), *PART_SIZE)
    assert result.exit_code == 0, result.stderr
    assert denied <= set(api_calls.keys("GetObject"))


def test_the_expired_lock_of_a_prefix_inside_is_not_an_object_of_the_upload(
    cli: Cli, s3: Any, bucket: str, model_dir: Path
) -> None:
    # Left by a run on another host that died uploading models/a/b/.
    lock = f"{OUTER}b{LOCK_SUFFIX}"
    s3.put_object(Bucket=BUCKET, Key=lock, Body=_lease_record(ELSEWHERE, 1))
    time.sleep(2.1)
    result = cli("upload", model_dir, _uri(OUTER), *PART_SIZE, "--delete")
    assert result.exit_code == 0, result.stderr
    assert "deleted 0;" in result.stdout
    # Not deleted: it is that prefix's lease, for its next run to take over.
    assert lock in _keys(s3, OUTER)


def test_a_local_file_named_as_a_lease_lock_is_refused(
    cli: Cli, bucket: str, model_dir: Path
) -> None:
    (model_dir / f"shard{LOCK_SUFFIX}").write_bytes(b"x")
    line = one_line_error(cli("upload", model_dir, _uri(OUTER), *PART_SIZE), 2)
    assert f"'shard{LOCK_SUFFIX}' ends in {LOCK_SUFFIX}, the name of the upload's lease" in line


def test_the_command_deadline_still_aborts_the_multipart_upload_and_releases_the_lease(
    s3: Any, bucket: str, model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DEADLINE_VARIABLE, "3")
    # The second part waits until the command's deadline has passed.
    pause = f"{tmp_path / 'at-part-2'}:5"
    completed, elapsed = _run(_hooked(model_dir, "UploadPart", "part2", "pause", pause))
    line = one_line_error(completed, 1)
    assert line.startswith("error: stopped: the command's AWS deadline of 3 s passed;")
    assert s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads", []) == []
    assert _keys(s3, f"models/llama-3-8b{LOCK_SUFFIX}") == []
    assert elapsed < 30


# SIGTERM (as Ctrl-C) outside the transfer: one line saying what state the prefix is in.


@pytest.mark.parametrize(
    ("operation", "said"),
    [
        ("HeadBucket", "interrupted; nothing under {uri} was changed"),
        ("ListMultipartUploads", "interrupted; objects already complete under {uri} are kept"),
        ("DeleteObjects", "interrupted; objects already complete under {uri} are kept"),
    ],
)
def test_sigterm_outside_the_transfer_ends_in_one_line_and_releases_the_lease(
    cli: Cli, s3: Any, bucket: str, model_dir: Path, operation: str, said: str
) -> None:
    uri = "s3://" + BUCKET + "/models/llama-3-8b/"
    # A complete upload, and an extra object for --delete to remove.
    assert cli("upload", model_dir, uri, *PART_SIZE).exit_code == 0
    s3.put_object(Bucket=BUCKET, Key="models/llama-3-8b/old.bin", Body=b"old")
    completed, _ = _run(_hooked(model_dir, operation, "*", "sigterm", "-", "--delete"))
    line = one_line_error(completed, 130)
    assert line.startswith("error: " + said.format(uri=uri)), line
    assert _keys(s3, f"models/llama-3-8b{LOCK_SUFFIX}") == []


@pytest.mark.parametrize("duration", ["1e20", "NaN", "1e9", "-5"])
def test_a_lock_claiming_an_absurd_lease_holds_the_prefix_only_briefly(
    cli: Cli, s3: Any, bucket: str, model_dir: Path, duration: str
) -> None:
    lock = f"models/llama-3-8b{LOCK_SUFFIX}"
    record = _lease_record(ELSEWHERE, 300).replace(
        b'"duration_s": 300', b'"duration_s": ' + duration.encode()
    )
    s3.put_object(Bucket=BUCKET, Key=lock, Body=record)
    line = one_line_error(cli("upload", model_dir, _uri("models/llama-3-8b/"), *PART_SIZE), 1)
    assert f"s3://{BUCKET}/{lock} holds a lease this version cannot read, live until " in line
    until = datetime.strptime(line.split("live until ")[1][:19], "%Y-%m-%d %H:%M:%S")
    assert until.replace(tzinfo=UTC) <= datetime.now(UTC) + timedelta(seconds=LEASE_S + 5)


def test_a_file_replaced_by_a_directory_after_the_scan_is_named_as_such(
    cli: Cli, s3: Any, bucket: str, model_dir: Path, api_calls: ApiCalls
) -> None:
    config = model_dir / "config.json"

    def swap(operation: str, params: dict[str, Any]) -> None:
        if operation == "HeadBucket" and not config.is_dir():
            config.unlink()
            config.mkdir()

    api_calls.fail = swap
    line = one_line_error(cli("upload", model_dir, _uri(OUTER), *PART_SIZE), 1)
    assert f"{config} was replaced by a directory after the scan; nothing of it was read" in line
    assert _keys(s3, OUTER) == []


@pytest.mark.parametrize(
    "date", ["garbage", "", "Mon, 32 Foo 2026 99:99:99 GMT", "Thu, 03 Dec 2026 12:00:00 -0000"]
)
def test_an_unreadable_date_from_a_proxy_falls_back_to_this_machines_clock(date: str) -> None:
    """A ``Date`` header a proxy mangled (or one with no zone) costs only the skew protection."""
    before = datetime.now(UTC)
    server_time = upload_lease._server_time({"ResponseMetadata": {"HTTPHeaders": {"date": date}}})
    assert before <= server_time <= datetime.now(UTC)


def test_s3s_date_is_s3s_clock() -> None:
    answer = {"ResponseMetadata": {"HTTPHeaders": {"date": "Thu, 03 Dec 2026 12:00:00 GMT"}}}
    assert upload_lease._server_time(answer) == datetime(2026, 12, 3, 12, tzinfo=UTC)
