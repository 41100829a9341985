"""``eks-inference plan`` warns when the API key would cross the VPC in clear text: an endpoint
requiring the key that listens on HTTP, without a certificate."""

from __future__ import annotations

from typing import Any

from eks_inference.ops.plan import plan_platform
from eks_inference.specification.platform import PlatformSpec
from eks_inference.specification.routes import key_in_clear_warnings
from tests.helpers.platforms import reference

CERTIFICATE = "arn:aws:acm:us-east-1:111122223333:certificate/0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"


def _platform(**endpoint: Any) -> PlatformSpec:
    data = reference()
    data["endpoint"] = endpoint
    return PlatformSpec.model_validate(data)


def test_the_plan_warns_that_the_key_travels_in_clear_over_http() -> None:
    platform = _platform()
    (warning,) = key_in_clear_warnings(platform.routes())
    assert "API key of 3 deployment(s) travels in clear text" in warning
    assert "(10.0.0.0/16)" in warning
    assert "endpoint.certificate_arn" in warning
    assert warning in plan_platform(platform).warnings


def test_no_warning_with_https_or_without_a_key() -> None:
    assert key_in_clear_warnings(_platform(certificate_arn=CERTIFICATE).routes()) == ()
    assert key_in_clear_warnings(_platform(authentication="none").routes()) == ()
    data = reference()
    del data["endpoint"]
    assert key_in_clear_warnings(PlatformSpec.model_validate(data).routes()) == ()
