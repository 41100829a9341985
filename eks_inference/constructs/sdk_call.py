"""``sdk_call_resource``: a custom resource that makes one AWS SDK call, allowed one statement."""

from __future__ import annotations

from aws_cdk import aws_iam as iam
from aws_cdk import custom_resources as cr
from constructs import Construct


def sdk_call_resource(
    scope: Construct,
    construct_id: str,
    call: cr.AwsSdkCall,
    allowed: iam.PolicyStatement,
    *,
    on_delete: cr.AwsSdkCall | None = None,
) -> cr.AwsCustomResource:
    """A custom resource that makes ``call`` when it is created and when it is updated, and
    ``on_delete`` (if any) when it is deleted: what ``call`` made, undone.

    Its Lambda may do what ``allowed`` allows and nothing else, and calls with the AWS SDK of
    its runtime (``install_latest_aws_sdk=False``): installing the newest at deploy time would
    reach the npm registry from the Lambda, and the runtime's SDK has every call made here.
    """
    return cr.AwsCustomResource(
        scope,
        construct_id,
        on_create=call,
        on_update=call,
        on_delete=on_delete,
        policy=cr.AwsCustomResourcePolicy.from_statements([allowed]),
        install_latest_aws_sdk=False,
    )
