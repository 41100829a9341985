"""The ``account`` and ``availability_zones`` context values are checked, each at its key.

``-c account=abc``, ``-c availability_zones=bogus``, zones of another region and zones given
without a fixed environment (where nothing would use them) were accepted with exit 0.
"""

from __future__ import annotations

import pytest
from aws_cdk import App
from pydantic import ValidationError

from eks_inference.specification.platform import PlatformSpec
from eks_inference.specification.validation import SpecError
from eks_inference.stacks import build_app
from tests.helpers.platforms import REFERENCE_PLATFORM

PLATFORM = PlatformSpec.from_yaml(REFERENCE_PLATFORM)


def _problems(**context: str) -> dict[str, str]:
    with pytest.raises(ValidationError) as raised:
        build_app(PLATFORM, app=App(context=context))
    return {".".join(map(str, e["loc"])): e["msg"] for e in raised.value.errors()}


@pytest.mark.parametrize("account", ["abc", "12345678901", "1234567890123", "123456789012 "])
def test_an_account_is_twelve_digits(account: str) -> None:
    assert _problems(account=account, region="us-east-1") == {
        "account": f"context account {account!r} is not an AWS account id; give its 12 "
        "digits, e.g. 123456789012 (aws sts get-caller-identity prints it)"
    }


@pytest.mark.parametrize(
    ("zones", "problem"),
    [
        ("bogus", "context availability_zones entry 'bogus' is not an Availability Zone name"),
        ("us-east-1a,us-east-1", "entry 'us-east-1' is not an Availability Zone name"),
        ("eu-west-1a,eu-west-1b", "entry 'eu-west-1a' is a zone of eu-west-1, not of the platform"),
    ],
)
def test_zones_are_zones_of_the_platforms_region(zones: str, problem: str) -> None:
    errors = _problems(region="us-east-1", availability_zones=zones)
    assert list(errors) == ["availability_zones"]
    assert problem in errors["availability_zones"]
    assert errors["availability_zones"].endswith("e.g. us-east-1a,us-east-1b,us-east-1c")


def test_zones_without_a_region_are_refused_not_ignored() -> None:
    assert _problems(availability_zones="us-east-1a,us-east-1b") == {
        "availability_zones": "context availability_zones applies to a fixed environment only "
        "(without one, CloudFormation picks the zones); add -c region=us-east-1, or remove it"
    }


def test_every_context_problem_is_reported_together() -> None:
    errors = _problems(account="abc", region="us-east-1", availability_zones="bogus")
    assert sorted(errors) == ["account", "availability_zones"]


def test_a_users_app_gets_one_line_naming_the_key() -> None:
    with pytest.raises(SpecError) as raised:
        build_app(PLATFORM, app=App(context={"account": "abc", "availability_zones": "bogus"}))
    assert str(raised.value).startswith(
        "account: context account 'abc' is not an AWS account id; give its 12 digits"
    )
    assert "; availability_zones: context availability_zones entry 'bogus'" in str(raised.value)
