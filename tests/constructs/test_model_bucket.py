"""The model bucket: retained, private, encrypted, TLS-only, versioned, logged."""

from __future__ import annotations

import pytest
from aws_cdk.assertions import Match

from eks_inference.constructs.model_bucket import _check_prefix
from tests.helpers.synthesis import Synthesized


@pytest.mark.parametrize("prefix", ["", "/models/", "models/llama", "s3://b/models/"])
def test_prefixes_must_be_relative_and_end_with_a_slash(prefix: str) -> None:
    with pytest.raises(ValueError, match="key prefix"):
        _check_prefix(prefix)


@pytest.mark.synth
@pytest.mark.xdist_group("synth")
def test_both_buckets_are_retained_private_encrypted_and_versioned(reference: Synthesized) -> None:
    buckets = reference.resources("AWS::S3::Bucket")
    assert len(buckets) == 2
    for bucket in buckets.values():
        assert bucket["DeletionPolicy"] == "Retain"
        assert bucket["UpdateReplacePolicy"] == "Retain"
        props = bucket["Properties"]
        assert props["PublicAccessBlockConfiguration"] == {
            "BlockPublicAcls": True,
            "BlockPublicPolicy": True,
            "IgnorePublicAcls": True,
            "RestrictPublicBuckets": True,
        }
        assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"] == [
            {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}
        ]
        assert props["VersioningConfiguration"] == {"Status": "Enabled"}
    # No auto-delete custom resource: the data outlives the stack.
    assert "Custom::S3AutoDeleteObjects" not in {
        r["Type"] for r in reference.templates["InferenceStack"]["Resources"].values()
    }


@pytest.mark.synth
@pytest.mark.xdist_group("synth")
def test_model_bucket_is_named_and_logs_to_the_log_bucket(reference: Synthesized) -> None:
    reference.template.has_resource_properties(
        "AWS::S3::Bucket",
        {
            "BucketName": "eks-inference-models-example",
            "LoggingConfiguration": {
                "DestinationBucketName": {"Ref": Match.string_like_regexp("ModelBucketAccessLogs")},
                "LogFilePrefix": "model-bucket/",
            },
        },
    )


@pytest.mark.synth
@pytest.mark.xdist_group("synth")
def test_both_buckets_deny_requests_without_tls(reference: Synthesized) -> None:
    policies = reference.resources("AWS::S3::BucketPolicy")
    assert len(policies) == 2
    for policy in policies.values():
        statements = policy["Properties"]["PolicyDocument"]["Statement"]
        assert any(
            s["Effect"] == "Deny"
            and s["Action"] == "s3:*"
            and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
            for s in statements
        )
