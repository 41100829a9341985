"""The model bucket aborts incomplete multipart uploads and keeps every object version."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk.assertions import Template

from eks_inference.constructs.model_bucket import ABORT_INCOMPLETE_UPLOADS_AFTER_DAYS, ModelBucket


def _model_bucket() -> dict[str, Any]:
    """The model bucket's resource in a stack that holds only a ModelBucket."""
    stack = cdk.Stack(cdk.App(), "Bucket")
    ModelBucket(stack, "Models", bucket_name="eks-inference-lifecycle-test")
    buckets = Template.from_stack(stack).find_resources(
        "AWS::S3::Bucket", {"Properties": {"BucketName": "eks-inference-lifecycle-test"}}
    )
    assert len(buckets) == 1
    bucket: dict[str, Any] = next(iter(buckets.values()))
    return bucket


def test_incomplete_multipart_uploads_are_aborted_and_versions_kept() -> None:
    bucket = _model_bucket()
    rules = bucket["Properties"]["LifecycleConfiguration"]["Rules"]
    # Exactly one rule, and it only aborts incomplete uploads: no expiration of current or
    # noncurrent versions (they are the rollback), no transitions.
    assert rules == [
        {
            "Id": "AbortIncompleteMultipartUploads",
            "AbortIncompleteMultipartUpload": {
                "DaysAfterInitiation": ABORT_INCOMPLETE_UPLOADS_AFTER_DAYS
            },
            "Status": "Enabled",
        }
    ]
    assert 1 <= ABORT_INCOMPLETE_UPLOADS_AFTER_DAYS <= 7
    assert bucket["Properties"]["VersioningConfiguration"] == {"Status": "Enabled"}
    assert bucket["DeletionPolicy"] == "Retain"
    assert bucket["UpdateReplacePolicy"] == "Retain"
