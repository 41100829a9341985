"""``upload`` against a real S3 emulator: checksums, skips, resume, refusals, manifest last."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError  # type: ignore[import-untyped]
from botocore.stub import Stubber  # type: ignore[import-untyped]
from typer.testing import Result

from eks_inference.ops.errors import CommandFailed
from eks_inference.ops.s3uri import S3Prefix
from eks_inference.ops.upload.lease import LOCK_SUFFIX
from eks_inference.ops.upload.remote import check_bucket

from .conftest import BIG, BUCKET, MIB, PART_SIZE, PREFIX, REGION, URI, ApiCalls

Cli = Callable[..., Result]
# Files above the 5 MiB part size go multipart: BIG (11 MiB) is three parts (5 + 5 + 1).
MULTIPART = ("CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload")
DATA_CALLS = ("PutObject", "CreateMultipartUpload")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    """A small Hugging Face-style model directory (plus a hidden file that is skipped)."""
    root = tmp_path / "llama"
    root.mkdir()
    (root / "config.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 32}))
    (root / "tokenizer.json").write_text(json.dumps({"version": "1.0", "model": {"type": "BPE"}}))
    (root / BIG).write_bytes(os.urandom(11 * MIB))
    (root / "model-00002-of-00002.safetensors").write_bytes(os.urandom(300 * 1024))
    (root / ".cache").mkdir()
    (root / ".cache" / "download.lock").write_text("")
    return root


def _local_files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
    }


def _remote_keys(s3: Any) -> set[str]:
    response = s3.list_objects_v2(Bucket=BUCKET, Prefix=PREFIX)
    return {item["Key"].removeprefix(PREFIX) for item in response.get("Contents", [])}


def _manifest(s3: Any) -> dict[str, Any]:
    body = s3.get_object(Bucket=BUCKET, Key=PREFIX + "_manifest.json")["Body"].read()
    data = json.loads(body)
    assert isinstance(data, dict)
    return data


def _upload(cli: Cli, root: Path, *args: str) -> Result:
    return cli("upload", root, URI, *PART_SIZE, *args)


def test_upload_sends_every_file_with_its_checksum(
    cli: Cli, s3: Any, bucket: str, model_dir: Path, api_calls: ApiCalls
) -> None:
    result = _upload(cli, model_dir)
    assert result.exit_code == 0, result.stderr
    local = _local_files(model_dir)
    assert _remote_keys(s3) == {*local, "_manifest.json"}
    for relative, data in local.items():
        head = s3.head_object(Bucket=BUCKET, Key=PREFIX + relative)
        assert head["ContentLength"] == len(data)
        assert head["Metadata"] == {"sha256": _sha256(data)}
        body = s3.get_object(Bucket=BUCKET, Key=PREFIX + relative)["Body"].read()
        assert _sha256(body) == _sha256(data)
    # The large file went multipart, in three parts; the others in one request each.
    assert api_calls.data_keys(*MULTIPART) == [PREFIX + BIG] * 5
    assert sorted(api_calls.data_keys("PutObject")) == sorted(
        PREFIX + k for k in [*local.keys() - {BIG}, "_manifest.json"]
    )
    manifest = _manifest(s3)
    assert manifest["kind"] == "weights"
    assert manifest["files"] == [
        {"key": k, "size": len(v), "sha256": _sha256(v)} for k, v in sorted(local.items())
    ]
    assert "uploaded 4 files" in result.stdout


def test_rerun_sends_nothing(
    cli: Cli, s3: Any, bucket: str, model_dir: Path, api_calls: ApiCalls
) -> None:
    assert _upload(cli, model_dir).exit_code == 0
    before = {k: s3.head_object(Bucket=BUCKET, Key=PREFIX + k) for k in _remote_keys(s3)}
    api_calls.clear()
    result = _upload(cli, model_dir)
    assert result.exit_code == 0, result.stderr
    assert api_calls.data_keys("PutObject", *MULTIPART) == []
    assert "uploaded 0 files (0 B), skipped 4 unchanged, deleted 0; manifest unchanged" in (
        result.stdout
    )
    for key, head in before.items():
        now = s3.head_object(Bucket=BUCKET, Key=PREFIX + key)
        assert (now["ETag"], now["LastModified"]) == (head["ETag"], head["LastModified"])


def test_interrupted_upload_resumes_with_only_the_missing_files(
    cli: Cli, s3: Any, bucket: str, model_dir: Path, api_calls: ApiCalls
) -> None:
    def fail_second_part(operation: str, params: dict[str, Any]) -> None:
        if operation == "UploadPart" and params["PartNumber"] == 2:
            raise ConnectionResetError("connection reset by peer")

    api_calls.fail = fail_second_part
    result = _upload(cli, model_dir)
    assert result.exit_code == 1
    assert "upload stopped" in result.stderr
    assert "re-run the same command" in result.stderr.lower()
    present = _remote_keys(s3)
    # The half-sent multipart upload is not an object, was aborted, and there is no manifest.
    assert BIG not in present
    assert "_manifest.json" not in present
    assert s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads", []) == []

    api_calls.fail = None
    api_calls.clear()
    result = _upload(cli, model_dir)
    assert result.exit_code == 0, result.stderr
    local = set(_local_files(model_dir))
    sent = {k.removeprefix(PREFIX) for k in api_calls.data_keys(*DATA_CALLS)}
    assert sent == (local - present) | {"_manifest.json"}
    # The manifest is the very last object written.
    writes = [
        p["Key"] for name, p in api_calls.calls if name in ("PutObject", "CompleteMultipartUpload")
    ]
    assert writes[-1] == PREFIX + "_manifest.json"
    assert _remote_keys(s3) == {*local, "_manifest.json"}


def test_failure_after_some_files_keeps_them_and_writes_no_manifest(
    cli: Cli, s3: Any, bucket: str, model_dir: Path, api_calls: ApiCalls
) -> None:
    puts = []

    def fail_third_put(operation: str, params: dict[str, Any]) -> None:
        if operation == "PutObject":
            puts.append(params["Key"])
            if len(puts) == 3:
                raise TimeoutError("read timed out")

    api_calls.fail = fail_third_put
    result = cli("upload", model_dir, URI, *PART_SIZE, "--concurrency", "1")
    assert result.exit_code == 1
    assert "read timed out" in result.stderr
    present = _remote_keys(s3)
    assert "_manifest.json" not in present
    assert present, "files completed before the failure are kept"

    api_calls.fail = None
    api_calls.clear()
    assert _upload(cli, model_dir).exit_code == 0
    sent = {k.removeprefix(PREFIX) for k in api_calls.data_keys(*DATA_CALLS)}
    assert sent == (set(_local_files(model_dir)) - present) | {"_manifest.json"}


def test_refuses_to_overwrite_a_differing_object(
    cli: Cli, s3: Any, bucket: str, model_dir: Path, api_calls: ApiCalls
) -> None:
    assert _upload(cli, model_dir).exit_code == 0
    config = model_dir / "config.json"
    original = config.read_bytes()
    # Same size, different content: only the checksum can tell.
    config.write_bytes(original.replace(b"32", b"40"))
    api_calls.clear()
    result = _upload(cli, model_dir)
    assert result.exit_code == 1
    assert "differs: config.json (same size, different sha256)" in result.stderr
    assert "--overwrite" in result.stderr
    assert "nothing was uploaded" in result.stderr
    assert api_calls.data_keys("PutObject", "DeleteObjects", *MULTIPART) == []
    body = s3.get_object(Bucket=BUCKET, Key=PREFIX + "config.json")["Body"].read()
    assert body == original

    api_calls.clear()
    result = _upload(cli, model_dir, "--overwrite")
    assert result.exit_code == 0, result.stderr
    assert set(api_calls.data_keys("PutObject")) == {
        PREFIX + "config.json",
        PREFIX + "_manifest.json",
    }
    body = s3.get_object(Bucket=BUCKET, Key=PREFIX + "config.json")["Body"].read()
    assert body == config.read_bytes()
    listed = {f["key"]: f["sha256"] for f in _manifest(s3)["files"]}
    assert listed["config.json"] == _sha256(config.read_bytes())


def test_refuses_to_delete_extra_objects(
    cli: Cli, s3: Any, bucket: str, model_dir: Path, api_calls: ApiCalls
) -> None:
    s3.put_object(Bucket=BUCKET, Key=PREFIX + "old/pytorch_model.bin", Body=b"stale")
    result = _upload(cli, model_dir)
    assert result.exit_code == 1
    assert "extra in S3: old/pytorch_model.bin" in result.stderr
    assert "--delete" in result.stderr
    assert api_calls.data_keys("PutObject", "DeleteObjects", *MULTIPART) == []
    assert _remote_keys(s3) == {"old/pytorch_model.bin"}

    result = _upload(cli, model_dir, "--delete")
    assert result.exit_code == 0, result.stderr
    assert "deleted 1" in result.stdout
    assert _remote_keys(s3) == {*_local_files(model_dir), "_manifest.json"}
    assert "old/pytorch_model.bin" not in {f["key"] for f in _manifest(s3)["files"]}


def test_changing_a_prefix_removes_its_manifest_first(
    cli: Cli, s3: Any, bucket: str, model_dir: Path, api_calls: ApiCalls
) -> None:
    assert _upload(cli, model_dir).exit_code == 0
    (model_dir / "generation_config.json").write_text("{}")

    def fail_put(operation: str, params: dict[str, Any]) -> None:
        # The lease's lock is written with PutObject too; the upload's own writes fail.
        if operation == "PutObject" and not params["Key"].endswith(LOCK_SUFFIX):
            raise ConnectionResetError("connection reset by peer")

    api_calls.fail = fail_put
    assert _upload(cli, model_dir).exit_code == 1
    # The old manifest no longer describes the prefix, so it must not be there.
    assert "_manifest.json" not in _remote_keys(s3)


def test_artifacts_get_a_completion_marker_after_the_manifest(
    cli: Cli, s3: Any, bucket: str, tmp_path: Path, api_calls: ApiCalls
) -> None:
    compiled = tmp_path / "compiled"
    (compiled / "graphs").mkdir(parents=True)
    (compiled / "model.pt").write_bytes(os.urandom(2048))
    (compiled / "graphs" / "neuron_config.json").write_text("{}")
    uri = f"s3://{BUCKET}/neuron-artifacts/x/"
    result = cli("upload", compiled, uri, "--kind", "artifacts")
    assert result.exit_code == 0, result.stderr
    keys = api_calls.data_keys("PutObject")
    assert keys[-2:] == ["neuron-artifacts/x/_manifest.json", "neuron-artifacts/x/_COMPLETE"]
    api_calls.clear()
    assert cli("upload", compiled, uri, "--kind", "artifacts").exit_code == 0
    assert api_calls.data_keys("PutObject") == []


def test_missing_bucket(cli: Cli, aws_env: str, model_dir: Path) -> None:
    result = _upload(cli, model_dir)
    assert result.exit_code == 1
    assert result.stderr.strip() == f"error: bucket {BUCKET} does not exist"


def test_access_denied_is_one_clear_line(aws_env: str) -> None:
    import boto3  # type: ignore[import-untyped]

    client = boto3.client("s3", region_name=REGION)
    with Stubber(client) as stubber:
        stubber.add_client_error("head_bucket", "403", http_status_code=403)
        with pytest.raises(CommandFailed, match=f"access denied to bucket {BUCKET}"):
            check_bucket(client, S3Prefix(BUCKET, PREFIX))


def test_other_aws_errors_name_their_code(aws_env: str) -> None:
    from eks_inference.ops.aws.errors import describe_error

    error = ClientError(
        {"Error": {"Code": "InvalidAccessKeyId", "Message": "The key does not exist"}}, "PutObject"
    )
    assert describe_error(error) == (
        "the AWS credentials were rejected (InvalidAccessKeyId: The key does not exist)"
    )
    denied = ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, "PutObject")
    assert describe_error(denied).startswith("access denied (AccessDenied)")
