"""The one place the operations create AWS clients.

Clients come from a :class:`boto3.Session`, so the standard configuration applies unchanged:
profiles (``AWS_PROFILE`` or ``--profile``), ``AWS_DEFAULT_REGION``, credentials from the
usual chain, and ``AWS_ENDPOINT_URL`` / ``AWS_ENDPOINT_URL_<SERVICE>`` (honoured by boto3
itself, which is how tests point the CLI at a local S3/EC2 emulator).

Every request has a bounded wait: botocore's standard retry mode (3 attempts unless
``AWS_MAX_ATTEMPTS`` or the profile says otherwise, exponential backoff with jitter) and
connect and read timeouts of ``EKS_INFERENCE_AWS_TIMEOUT`` seconds (default 30), so an
endpoint that accepts connections and never answers fails a command within about
``attempts x timeout`` instead of hanging it. An endpoint that answers a byte at a time is
bounded by the total deadlines of :mod:`eks_inference.ops.aws.deadlines`.
"""

from __future__ import annotations

from typing import Any

import boto3  # type: ignore[import-untyped]
from botocore.config import Config  # type: ignore[import-untyped]
from botocore.exceptions import (  # type: ignore[import-untyped]
    InvalidRetryConfigurationError,
    NoRegionError,
    ProfileNotFound,
)

from eks_inference.ops.aws.answers import require_complete_answers
from eks_inference.ops.aws.deadlines import Deadlines, request_timeout
from eks_inference.ops.aws.errors import one_line
from eks_inference.ops.errors import BadInput


class Aws:
    """Clients from one session, so that every call of a command uses the same identity.

    All of them share one set of :class:`~eks_inference.ops.aws.deadlines.Deadlines`, made
    with the first client: the command's budget counts from then.
    """

    def __init__(self, session: Any) -> None:
        self.session = session
        self._deadlines: Deadlines | None = None

    @property
    def deadlines(self) -> Deadlines:
        """The request and command deadlines every client of this session obeys."""
        if self._deadlines is None:
            self._deadlines = Deadlines(request_timeout())
        return self._deadlines

    def client(
        self, service: str, region: str | None = None, max_connections: int | None = None
    ) -> Any:
        """A client for ``service``, in ``region`` or the session's default region.

        Retries (mode and attempts) are left to botocore's configuration chain, whose default
        is the standard mode; timeouts are :func:`request_timeout`, and every request and the
        command as a whole have the total deadlines of :attr:`deadlines`. An answer cut short
        or without the fields its success carries is a failure
        (:mod:`~eks_inference.ops.aws.answers`). ``max_connections``
        sizes the connection pool for that many requests at once (botocore's default is 10).
        """
        timeout = request_timeout()
        deadlines = self.deadlines
        options: dict[str, Any] = {}
        if max_connections is not None:
            options["max_pool_connections"] = max_connections
        config = Config(
            connect_timeout=timeout,
            read_timeout=timeout,
            user_agent_extra="eks-inference",
            **options,
        )
        try:
            client = self.session.client(service, region_name=region, config=config)
            deadlines.install(client)
            require_complete_answers(client)
            return client
        except NoRegionError:
            raise BadInput(
                "no AWS region configured; set AWS_DEFAULT_REGION or a profile's region"
            ) from None
        except (ValueError, InvalidRetryConfigurationError) as error:
            # botocore reads these settings only here: AWS_MAX_ATTEMPTS=abc is a ValueError.
            raise BadInput(
                f"the AWS configuration is invalid ({one_line(str(error))}); check "
                "AWS_MAX_ATTEMPTS, AWS_RETRY_MODE, AWS_ENDPOINT_URL and the profile"
            ) from None


def connect(profile: str | None = None) -> Aws:
    """A session with the standard configuration, or ``profile`` from the config files."""
    try:
        return Aws(boto3.Session(profile_name=profile))
    except ProfileNotFound:
        raise BadInput(f"AWS profile {profile!r} not found in the AWS config files") from None
