"""``upload`` never lies, loses data or hangs (issue 17): one writer per prefix, files read as
scanned, deletions in order, total deadlines, bounded concurrency and manifests.

Runs use the real S3 emulator on 127.0.0.1. moto 5.2.5 honours ``If-None-Match: *`` and
``If-Match`` on PutObject and ``If-Match`` on DeleteObject (checked here against it), which
is all the lease needs; it reports every multipart upload as initiated on 2010-11-10, so which
uploads count as stale is checked against ListMultipartUploads answers shaped as S3 sends
them. It also stores a PutObject's CRC-32 header without checking it against the body, which
is what let a file rewritten during its PUT pass before.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3  # type: ignore[import-untyped]
import pytest
from botocore.exceptions import ClientError  # type: ignore[import-untyped]
from botocore.stub import Stubber  # type: ignore[import-untyped]
from typer.testing import Result

from eks_inference.cli.inputs import load_platform
from eks_inference.cli.upload import MAX_CONCURRENCY
from eks_inference.ops.aws import clients as aws_clients
from eks_inference.ops.aws.deadlines import DEADLINE_VARIABLE, TIMEOUT_VARIABLE
from eks_inference.ops.errors import CommandFailed
from eks_inference.ops.s3uri import S3Prefix
from eks_inference.ops.upload.lease import LOCK_SUFFIX, Lease, LeaseOwner, acquire
from eks_inference.ops.upload.remote import abort_stale_uploads
from tests.helpers.errors import one_line_error
from tests.helpers.platforms import REFERENCE_PLATFORM, REPO

from .conftest import BIG, BUCKET, MIB, PART_SIZE, PREFIX, REGION, SMALL, URI, ApiCalls, upload

Cli = Callable[..., Result]
LOCK = "models/llama-3-8b" + LOCK_SUFFIX
# Three parts of 5, 5 and 1 MiB.
DATA_WRITES = ("PutObject", "CreateMultipartUpload", "DeleteObjects", "DeleteObject")


def _remote(s3: Any) -> dict[str, bytes]:
    response = s3.list_objects_v2(Bucket=BUCKET, Prefix=PREFIX)
    return {
        item["Key"].removeprefix(PREFIX): s3.get_object(Bucket=BUCKET, Key=item["Key"])[
            "Body"
        ].read()
        for item in response.get("Contents", [])
    }


def _local(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _assert_complete(s3: Any, root: Path) -> None:
    """The prefix holds exactly the local files, and a manifest that lists each one truly."""
    remote = _remote(s3)
    local = _local(root)
    assert set(remote) == {*local, "_manifest.json"}
    manifest = json.loads(remote["_manifest.json"])
    listed = {f["key"]: f["sha256"] for f in manifest["files"]}
    assert listed == {k: hashlib.sha256(v).hexdigest() for k, v in local.items()}
    assert all(remote[k] == v for k, v in local.items())


# A CLI run in its own process that acts once when a request matches: the operation's name,
# then the key's last segment or ``*`` for any request, or ``part<N>`` for an upload part.
# ``pause`` creates the marker file and sleeps the seconds given; ``hold`` creates the marker
# and waits until the test creates the marker's ``.release`` file (:func:`_release`), for a
# minute at most, so the run holds its lease for exactly as long as the test needs.
_HOOKED_RUN = """
import os, signal, sys, time
from eks_inference.ops.aws import clients as aws_clients
from eks_inference.cli.main import main

HOLD_S = 60
operation, match, action, argument = sys.argv[1:5]
sys.argv = ["eks-inference", *sys.argv[5:]]
real_connect = aws_clients.connect
fired = []


def act():
    if action == "fifo":
        os.remove(argument)
        os.mkfifo(argument)
    elif action == "truncate":
        path, size = argument.rsplit(":", 1)
        os.truncate(path, int(size))
    elif action == "pause":
        marker, seconds = argument.rsplit(":", 1)
        open(marker, "w").close()
        time.sleep(float(seconds))
    elif action == "hold":
        open(argument, "w").close()
        deadline = time.monotonic() + HOLD_S
        while not os.path.exists(argument + ".release") and time.monotonic() < deadline:
            time.sleep(0.02)
    elif action == "sigterm":
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(2)


def connect(profile=None):
    session = real_connect(profile)

    def hook(params, **_):
        key = str(params.get("Key", ""))
        part = f"part{params.get('PartNumber')}"
        hit = match in ("*", part) or key.endswith("/" + match)
        if hit and not fired:
            fired.append(True)
            act()

    session.session.events.register(f"before-parameter-build.s3.{operation}", hook)
    return session


aws_clients.connect = connect
main()
"""


def _hooked(
    root: Path, operation: str, match: str, action: str, argument: str, *args: str
) -> list[str]:
    return [
        sys.executable,
        "-c",
        _HOOKED_RUN,
        operation,
        match,
        action,
        argument,
        "upload",
        str(root),
        URI,
        *PART_SIZE,
        *args,
    ]


def _release(marker: Path) -> None:
    """Let a run held by the ``hold`` action at ``marker`` go on."""
    marker.with_name(marker.name + ".release").touch()


def _run(command: list[str], timeout: float = 60) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    completed = subprocess.run(
        command, capture_output=True, text=True, check=False, timeout=timeout, cwd=REPO
    )
    return completed, time.monotonic() - started


# Item 2: one writer per prefix.


def test_a_second_upload_to_a_prefix_being_uploaded_is_refused_and_breaks_nothing(
    cli: Cli, s3: Any, bucket: str, model_dir: Path, tmp_path: Path
) -> None:
    reached = tmp_path / "first-run-at-part-2"
    first = subprocess.Popen(
        _hooked(model_dir, "UploadPart", "part2", "hold", str(reached), "--concurrency", "1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        deadline = time.monotonic() + 60
        while not reached.exists():
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, "the first run never reached its second part"
            time.sleep(0.05)
        # The first run holds the lease and has a multipart upload open.
        assert [u["Key"] for u in s3.list_multipart_uploads(Bucket=BUCKET)["Uploads"]] == [
            PREFIX + BIG
        ]
        second = upload(cli, model_dir, "--overwrite", "--delete")
        line = one_line_error(second, 1)
        assert f"another upload holds the lease on {URI} (host " in line
        assert f", pid {first.pid}, id " in line
        assert " UTC, renewed while it runs; nothing was sent" in line
        # The second run aborted nothing of the first's.
        assert len(s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads", [])) == 1
        _release(reached)
        stdout, stderr = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 0, stderr
    assert "uploaded 4 files" in stdout
    _assert_complete(s3, model_dir)
    # Released at the end.
    assert "Contents" not in s3.list_objects_v2(Bucket=BUCKET, Prefix=LOCK)


def _lease_record(owner: LeaseOwner, duration_s: float) -> bytes:
    now = datetime.now(UTC)
    record = {
        "format": 1,
        "owner": owner.model_dump(),
        "created": now.isoformat(),
        "expires": (now + timedelta(seconds=duration_s)).isoformat(),
        "duration_s": duration_s,
    }
    return json.dumps(record).encode()


ELSEWHERE = LeaseOwner(host="build-7", pid_namespace=None, pid=4242, id="0123456789abcdef")


def test_a_live_lease_of_another_host_refuses_naming_its_owner_and_expiry(
    cli: Cli, s3: Any, bucket: str, model_dir: Path, api_calls: ApiCalls
) -> None:
    s3.put_object(Bucket=BUCKET, Key=LOCK, Body=_lease_record(ELSEWHERE, 300))
    line = one_line_error(upload(cli, model_dir), 1)
    assert f"another upload holds the lease on {URI} (host build-7, pid 4242, id " in line
    assert "0123456789abcdef) until 20" in line
    assert f"if it is dead for the lease to expire (s3://{BUCKET}/{LOCK})" in line
    assert api_calls.data_keys(*DATA_WRITES) == []
    assert _remote(s3) == {}


def test_an_expired_lease_is_taken_over_and_stale_uploads_are_aborted(
    cli: Cli, s3: Any, bucket: str, model_dir: Path, api_calls: ApiCalls
) -> None:
    s3.put_object(Bucket=BUCKET, Key=LOCK, Body=_lease_record(ELSEWHERE, 1))
    s3.create_multipart_upload(Bucket=BUCKET, Key=PREFIX + BIG)
    time.sleep(2.1)
    result = upload(cli, model_dir)
    assert result.exit_code == 0, result.stderr
    assert "aborted 1 multipart upload that an earlier run left open" in result.stderr
    assert "note: took over the upload lease of host build-7, pid 4242" in result.stderr
    # Taken over with a write conditional on the expired lock's ETag (as is each renewal),
    # then released.
    writes = [p for name, p in api_calls.calls if name == "PutObject" and p["Key"] == LOCK]
    conditions = [sorted(set(p) & {"IfMatch", "IfNoneMatch"}) for p in writes]
    assert conditions[0] == ["IfNoneMatch"]
    assert conditions[1:] == [["IfMatch"]] * (len(writes) - 1)
    assert "Contents" not in s3.list_objects_v2(Bucket=BUCKET, Prefix=LOCK)
    _assert_complete(s3, model_dir)


def test_the_lease_is_conditional_so_a_taken_over_lease_is_never_overwritten(
    s3: Any, bucket: str
) -> None:
    # The emulator's conditional writes, on which the lease rests.
    s3.put_object(Bucket=BUCKET, Key=LOCK, Body=b"1", IfNoneMatch="*")
    with pytest.raises(ClientError, match="PreconditionFailed"):
        s3.put_object(Bucket=BUCKET, Key=LOCK, Body=b"2", IfNoneMatch="*")
    etag = s3.head_object(Bucket=BUCKET, Key=LOCK)["ETag"]
    s3.put_object(Bucket=BUCKET, Key=LOCK, Body=b"3", IfMatch=etag)
    with pytest.raises(ClientError, match="PreconditionFailed"):
        s3.put_object(Bucket=BUCKET, Key=LOCK, Body=b"4", IfMatch=etag)
    with pytest.raises(ClientError, match="PreconditionFailed"):
        s3.delete_object(Bucket=BUCKET, Key=LOCK, IfMatch=etag)
    assert s3.get_object(Bucket=BUCKET, Key=LOCK)["Body"].read() == b"3"


def test_a_lease_taken_over_cannot_be_renewed_or_released(s3: Any, bucket: str) -> None:
    target = S3Prefix(BUCKET, PREFIX)
    lease = acquire(s3, target)
    # Another run took the lease over (as it may once this one stopped renewing in time).
    s3.put_object(Bucket=BUCKET, Key=LOCK, Body=_lease_record(ELSEWHERE, 300))
    with pytest.raises(CommandFailed, match="was taken over by another upload"):
        lease.renew()
    lease.release()
    record = json.loads(s3.get_object(Bucket=BUCKET, Key=LOCK)["Body"].read())
    assert record["owner"]["host"] == "build-7"


def test_sigterm_releases_the_lease(s3: Any, bucket: str, model_dir: Path) -> None:
    command = _hooked(model_dir, "UploadPart", "part2", "sigterm", "-", "--concurrency", "1")
    completed, _ = _run(command)
    assert completed.returncode == 130, completed.stderr
    assert "Contents" not in s3.list_objects_v2(Bucket=BUCKET, Prefix=LOCK)
    assert s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads", []) == []


def test_only_uploads_begun_before_the_lease_and_the_previous_expiry_are_aborted() -> None:
    client = boto3.client(
        "s3", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x"
    )
    target = S3Prefix(BUCKET, PREFIX)
    taken = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)
    previous_expiry = taken - timedelta(minutes=2)
    lease = Lease(client, target, ELSEWHERE, '"e"', taken, previous_expiry, ELSEWHERE)
    assert lease.stale_before == previous_expiry
    uploads = [
        # Begun while the previous lease was live: its run is gone now.
        ("a.safetensors", "u1", previous_expiry - timedelta(seconds=30)),
        # Begun after that lease expired, by a run writing without it: not this run's to abort.
        ("b.safetensors", "u2", previous_expiry + timedelta(seconds=30)),
        # Begun after this run took the lease.
        ("c.safetensors", "u3", taken + timedelta(seconds=5)),
    ]
    with Stubber(client) as stubber:
        stubber.add_response(
            "list_multipart_uploads",
            {
                "Bucket": BUCKET,
                "Uploads": [
                    {"Key": PREFIX + key, "UploadId": upload_id, "Initiated": initiated}
                    for key, upload_id, initiated in uploads
                ],
                "IsTruncated": False,
            },
            {"Bucket": BUCKET, "Prefix": PREFIX},
        )
        stubber.add_response(
            "abort_multipart_upload",
            {},
            {"Bucket": BUCKET, "Key": PREFIX + "a.safetensors", "UploadId": "u1"},
        )
        assert abort_stale_uploads(client, target, lease.stale_before) == ["a.safetensors"]
        stubber.assert_no_pending_responses()


# Items 3 and 5: files read as scanned, checksums of the bytes sent.


def _record_sent_payload_hashes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The SHA-256 of every PutObject body as sent (botocore signs it over plain HTTP)."""
    sent: list[str] = []
    inner = aws_clients.connect

    def connect(profile: str | None = None) -> aws_clients.Aws:
        session = inner(profile)

        def record(request: Any, **_: Any) -> None:
            sent.append(request.headers.get("x-amz-content-sha256", b"").decode())

        session.session.events.register("before-send.s3.PutObject", record)
        return session

    monkeypatch.setattr(aws_clients, "connect", connect)
    return sent


def test_a_file_swapped_for_a_link_after_the_scan_is_not_followed(
    cli: Cli,
    s3: Any,
    bucket: str,
    model_dir: Path,
    tmp_path: Path,
    api_calls: ApiCalls,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = model_dir / "config.json"
    secret = tmp_path / "credentials"
    # As long as the file it replaces, so that no size check can notice the swap.
    secret.write_bytes(b"k" * config.stat().st_size)

    def swap(operation: str, params: dict[str, Any]) -> None:
        if operation == "HeadBucket" and not config.is_symlink():
            config.unlink()
            config.symlink_to(secret)

    api_calls.fail = swap
    sent = _record_sent_payload_hashes(monkeypatch)
    result = upload(cli, model_dir)
    assert hashlib.sha256(secret.read_bytes()).hexdigest() not in sent
    line = one_line_error(result, 1)
    assert f"{config} was replaced by a symbolic link after the scan; nothing of it was read" in (
        line
    )
    remote = _remote(s3)
    assert "config.json" not in remote
    assert "_manifest.json" not in remote


def test_a_fifo_swapped_in_after_the_scan_is_refused_without_hanging(
    s3: Any, bucket: str, model_dir: Path
) -> None:
    config = model_dir / "config.json"
    completed, elapsed = _run(_hooked(model_dir, "HeadBucket", "*", "fifo", str(config)))
    line = one_line_error(completed, 1)
    assert f"{config} is no longer a regular file (a FIFO, socket or device was swapped in" in line
    assert elapsed < 30
    assert "_manifest.json" not in _remote(s3)


def test_a_file_rewritten_during_its_put_is_not_left_in_s3_or_the_manifest(
    cli: Cli, s3: Any, bucket: str, model_dir: Path, api_calls: ApiCalls
) -> None:
    small = model_dir / SMALL
    before = small.stat()

    def rewrite(operation: str, params: dict[str, Any]) -> None:
        if operation == "PutObject" and params["Key"] == PREFIX + SMALL:
            # Other bytes of the same size, and the modification time put back, as a copy
            # that preserves times does: only the bytes themselves tell.
            small.write_bytes(os.urandom(before.st_size))
            os.utime(small, ns=(before.st_atime_ns, before.st_mtime_ns))

    api_calls.fail = rewrite
    line = one_line_error(upload(cli, model_dir), 1)
    assert f"1 file changed while being uploaded ({SMALL}): the bytes sent differ" in line
    remote = _remote(s3)
    assert SMALL not in remote
    assert "_manifest.json" not in remote


def test_a_file_that_shrinks_during_its_upload_fails_at_once_saying_so(
    s3: Any, bucket: str, model_dir: Path
) -> None:
    small = model_dir / SMALL
    completed, elapsed = _run(
        _hooked(model_dir, "PutObject", SMALL, "truncate", f"{small}:1000"), timeout=80
    )
    line = one_line_error(completed, 1)
    assert f"upload stopped ({SMALL}: {small} changed after the scan" in line
    # Not S3's fault, and not after S3 gave up waiting for the missing bytes (30 s a try).
    assert "S3" not in line.split(";")[0]
    assert elapsed < 25
    assert "_manifest.json" not in _remote(s3)


# Item 4: --delete.


def _with_manifest(cli: Cli, s3: Any, model_dir: Path, *extra: str) -> bytes:
    assert upload(cli, model_dir).exit_code == 0
    for key in extra:
        s3.put_object(Bucket=BUCKET, Key=PREFIX + key, Body=b"stale")
    body: bytes = s3.get_object(Bucket=BUCKET, Key=PREFIX + "_manifest.json")["Body"].read()
    return body


def test_delete_removes_keys_xml_cannot_carry_and_names_each_key_deleted(
    cli: Cli, s3: Any, bucket: str, model_dir: Path
) -> None:
    _with_manifest(cli, s3, model_dir, "stale\x01shard.bin", "old/pytorch_model.bin")
    result = upload(cli, model_dir, "--delete")
    assert result.exit_code == 0, result.stderr
    assert f"deleted {URI}stale\\x01shard.bin\n" in result.stderr
    assert f"deleted {URI}old/pytorch_model.bin\n" in result.stderr
    assert "deleted 2 (listed above); manifest written" in result.stdout
    _assert_complete(s3, model_dir)


def _deny_deleting(key: str) -> Callable[[str, dict[str, Any]], None]:
    """An API-call hook under which S3 refuses any DeleteObjects naming ``key``."""

    def deny(operation: str, params: dict[str, Any]) -> None:
        keys = [o["Key"] for o in params.get("Delete", {}).get("Objects", [])]
        if operation == "DeleteObjects" and key in keys:
            raise ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, operation)

    return deny


def test_a_refused_deletion_keeps_the_manifest_of_the_unchanged_prefix(
    cli: Cli, s3: Any, bucket: str, model_dir: Path, api_calls: ApiCalls
) -> None:
    manifest = _with_manifest(cli, s3, model_dir, "old/pytorch_model.bin")

    api_calls.fail = _deny_deleting(PREFIX + "old/pytorch_model.bin")
    line = one_line_error(upload(cli, model_dir, "--delete"), 1)
    assert "cannot delete old/pytorch_model.bin: access denied (AccessDenied)" in line
    assert line.endswith("deleted before it: none")
    # Nothing changed, so the prefix is still the complete upload its manifest describes.
    remote = _remote(s3)
    assert remote["_manifest.json"] == manifest
    assert "old/pytorch_model.bin" in remote


def test_a_deletion_that_stops_names_the_keys_already_deleted(
    cli: Cli, s3: Any, bucket: str, model_dir: Path, api_calls: ApiCalls
) -> None:
    _with_manifest(cli, s3, model_dir, "stale\x01shard.bin", "old/pytorch_model.bin")

    api_calls.fail = _deny_deleting(PREFIX + "old/pytorch_model.bin")
    line = one_line_error(upload(cli, model_dir, "--delete"), 1)
    assert line.endswith("deleted before it: stale\\x01shard.bin")
    remote = _remote(s3)
    assert "stale\x01shard.bin" not in remote
    # Something changed: the old manifest is not put back.
    assert "_manifest.json" not in remote


# Item 6: total deadlines.


def test_a_drip_feeding_endpoint_fails_within_the_request_deadline_with_one_line(
    aws_env: str, drip_endpoint: str, model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", drip_endpoint)
    monkeypatch.setenv(TIMEOUT_VARIABLE, "0.5")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")
    completed, elapsed = _run(
        [sys.executable, "-m", "eks_inference", "upload", str(model_dir), URI], timeout=60
    )
    line = one_line_error(completed, 1)
    origin = drip_endpoint.removeprefix("http://")
    assert line.startswith(f"error: stopped: a request to {origin} (HEAD) outlived its deadline")
    assert "of 1 s plus 1 s per MiB sent" in line
    # Two attempts of at most 1 s each, a backoff of at most 2 s, and the interpreter's start.
    assert elapsed < 15


def test_the_command_deadline_ends_the_command(
    aws_env: str, drip_endpoint: str, model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", drip_endpoint)
    # Each request could last 20 s and retry 5 times; the command may take 1.5 s of AWS time.
    monkeypatch.setenv(TIMEOUT_VARIABLE, "10")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "5")
    monkeypatch.setenv(DEADLINE_VARIABLE, "1.5")
    completed, elapsed = _run(
        [sys.executable, "-m", "eks_inference", "upload", str(model_dir), URI], timeout=60
    )
    line = one_line_error(completed, 1)
    assert line.startswith("error: stopped: the command's AWS deadline of 1.5 s passed;")
    assert elapsed < 15


@pytest.mark.parametrize("value", ["0", "-1", "soon", "nan", "1e9"])
def test_the_command_deadline_setting_is_checked(
    cli: Cli, bucket: str, model_dir: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(DEADLINE_VARIABLE, value)
    line = one_line_error(upload(cli, model_dir), 2)
    assert f"{DEADLINE_VARIABLE}={value!r} must be a number of seconds above 0" in line


# Item 7: bounded concurrency and manifests.


def test_concurrency_beyond_the_maximum_is_refused_with_the_reason(
    cli: Cli, bucket: str, model_dir: Path, api_calls: ApiCalls
) -> None:
    line = one_line_error(upload(cli, model_dir, "--concurrency", "100000"), 2)
    assert f"--concurrency must be at most {MAX_CONCURRENCY}, got 100000: that many" in line
    assert api_calls.calls == []


def test_the_connection_pool_is_sized_for_the_concurrency(aws_env: str) -> None:
    client = aws_clients.connect().client("s3", max_connections=MAX_CONCURRENCY)
    assert client.meta.config.max_pool_connections == MAX_CONCURRENCY


_READ_HUGE_MANIFEST = """
import sys, time
import boto3
from eks_inference.cli.inputs import load_platform
from eks_inference.ops.preflight import check_weights

platform = load_platform(sys.argv[1])
spec = platform.deployment("llama3-8b-inf2")
started = time.monotonic()
check = check_weights(boto3.client("s3"), sys.argv[2], spec)
elapsed = round(time.monotonic() - started, 2)
# The peak resident memory of this program alone (reset when it was started).
with open("/proc/self/status") as status:
    peak_kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
print(check.status, elapsed, peak_kib)
print(check.detail)
"""


def test_preflight_refuses_a_huge_manifest_without_reading_it(s3: Any, tmp_path: Path) -> None:
    platform = load_platform(REFERENCE_PLATFORM)
    spec = platform.deployment("llama3-8b-inf2")
    s3.create_bucket(Bucket=platform.model_bucket_name)
    hostile = b'{"format": 1, "kind": "weights", "files": [' + b" " * (150 * MIB) + b"]}"
    s3.put_object(
        Bucket=platform.model_bucket_name,
        Key=spec.weights.prefix + "_manifest.json",
        Body=hostile,
    )
    del hostile
    command = [
        sys.executable,
        "-c",
        _READ_HUGE_MANIFEST,
        str(REFERENCE_PLATFORM),
        platform.model_bucket_name,
    ]
    completed, _ = _run(command)
    assert completed.returncode == 0, completed.stderr
    verdict, detail = completed.stdout.splitlines()
    status, elapsed, peak_kib = verdict.split()
    # Well below the manifest's 150 MiB: it was never read into memory.
    assert int(peak_kib) < 140 * 1024, peak_kib
    assert float(elapsed) < 5
    assert status == "FAIL"
    assert "is larger than the 16.0 MiB an upload manifest can be, so it was not read" in detail
