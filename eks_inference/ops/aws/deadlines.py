"""How long AWS requests may wait: for each byte, each request, and a command's AWS work.

botocore's connect and read timeouts bound each wait for a byte, not a request: an endpoint
that answers one byte every few seconds keeps a request alive forever, retries included. Here
every connection of a client reports when it starts a request and when it goes back to the
pool, and one watchdog thread shuts the socket of a request that outlives its deadline (the
blocked read then ends at once, and botocore retries or fails as for a dropped connection).
Past the command's deadline every open request is cut the same way and new ones fail before
they are sent, except cleanup: a ``DELETE`` (aborting a multipart upload, releasing the upload
lease) may still start for one more request deadline, so a run stopped by its deadline leaves no
parts billed and no lease blocking the prefix behind it.

The per-wait timeout every client is configured with is :func:`request_timeout`
(``EKS_INFERENCE_AWS_TIMEOUT`` seconds, default 30). The deadlines:

* a request gets twice the per-wait timeout (``EKS_INFERENCE_AWS_TIMEOUT``) plus one second
  per MiB it sends, so an upload part of 64 MiB on a slow 1 MiB/s link still fits;
* a command gets ``EKS_INFERENCE_AWS_DEADLINE`` seconds when set; by default ten minutes,
  which checks and listings never come close to, plus one second per MiB an upload sends
  (again a floor of 1 MiB/s, far below any link that can carry model weights).
"""

from __future__ import annotations

import math
import os
import socket
import threading
import time
import weakref
from contextlib import suppress
from typing import Any

from botocore.awsrequest import (  # type: ignore[import-untyped]
    AWSHTTPConnection,
    AWSHTTPConnectionPool,
    AWSHTTPSConnection,
    AWSHTTPSConnectionPool,
)

from eks_inference.ops.aws.answers import CompleteHeadConnection
from eks_inference.ops.errors import BadInput, CommandFailed, Interrupted

TIMEOUT_VARIABLE = "EKS_INFERENCE_AWS_TIMEOUT"
DEFAULT_TIMEOUT_S = 30.0
# A wait longer than an hour is a hang by another name.
_MAX_TIMEOUT_S = 3600.0

DEADLINE_VARIABLE = "EKS_INFERENCE_AWS_DEADLINE"
DEFAULT_COMMAND_DEADLINE_S = 600.0
# The slowest transfer rate a deadline allows for: 1 MiB/s.
MIN_BYTES_PER_S = 1024**2
# A command longer than a week is not waiting on the network any more.
_MAX_DEADLINE_S = 7 * 24 * 3600.0
# How often the watchdog looks at the running requests.
_WATCH_INTERVAL_S = 0.05


class DeadlinePassedError(Exception):
    """A request was about to start after the command's deadline had passed."""


def seconds_setting(variable: str, maximum: float) -> float | None:
    """The environment variable ``variable`` as seconds in (0, ``maximum``], or None when it
    is not set; anything else is bad input naming the variable."""
    raw = os.environ.get(variable, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not 0 < value <= maximum:
        raise BadInput(
            f"{variable}={raw!r} must be a number of seconds above 0 and at most {maximum:g}"
        )
    return value


def command_deadline_setting() -> float | None:
    """``EKS_INFERENCE_AWS_DEADLINE`` in seconds, or None when it is not set."""
    return seconds_setting(DEADLINE_VARIABLE, _MAX_DEADLINE_S)


def request_timeout() -> float:
    """Seconds a request waits to connect, and then for each next byte of the answer.

    ``EKS_INFERENCE_AWS_TIMEOUT`` overrides the default of 30 s: a busy link may need more,
    a test of a stalled endpoint less.
    """
    value = seconds_setting(TIMEOUT_VARIABLE, _MAX_TIMEOUT_S)
    return DEFAULT_TIMEOUT_S if value is None else value


class Deadlines:
    """The request and command deadlines of one command, enforced on its clients' sockets.

    ``request_timeout_s`` is the per-wait timeout the clients are configured with; a fixed
    ``EKS_INFERENCE_AWS_DEADLINE`` replaces the default command budget and is never extended.
    """

    def __init__(self, request_timeout_s: float) -> None:
        self.request_timeout_s = request_timeout_s
        self._fixed = command_deadline_setting()
        self.command_budget_s = self._fixed or DEFAULT_COMMAND_DEADLINE_S
        self._started: float | None = None
        self._lock = threading.Lock()
        # Each running request: when it must end, what it is, whether it is cleanup.
        self._running: weakref.WeakKeyDictionary[Any, tuple[float, str, bool]] = (
            weakref.WeakKeyDictionary()
        )
        self._watchdog: threading.Thread | None = None
        self.cut: str | None = None
        """What the last cut request was, for the command's error; None while none was cut."""

    def allow_bytes(self, size: int) -> None:
        """Extend the default command budget for ``size`` bytes about to be sent."""
        if self._fixed is None:
            self.command_budget_s += size / MIN_BYTES_PER_S

    @property
    def command_passed(self) -> bool:
        """True once the command's budget, counted from its first request, is spent.

        From the first request rather than the start: hashing a large model before the upload
        talks to S3 is no wait on the network.
        """
        started = self._started
        return started is not None and time.monotonic() - started > self.command_budget_s

    def _cleanup_allowed(self, method: str) -> float | None:
        """Past the command's deadline, the time left for a cleanup request, else None.

        Cleanup is a ``DELETE`` (an abort, the lease's release) started within one bodiless
        request deadline after the command's: the grace is fixed, so cleanup cannot keep the
        command alive longer than that.
        """
        started = self._started
        if method.upper() != "DELETE" or started is None:
            return None
        grace_ends = started + self.command_budget_s + self.request_deadline_s(0)
        left = grace_ends - time.monotonic()
        return left if left > 0 else None

    def request_deadline_s(self, body_bytes: int) -> float:
        """The total time one request sending ``body_bytes`` may take."""
        return 2 * self.request_timeout_s + body_bytes / MIN_BYTES_PER_S

    def install(self, client: Any) -> None:
        """Make every connection of a botocore ``client`` report to these deadlines.

        botocore builds its connection pools from a per-session table of pool classes; the
        client's HTTP session is reached through its endpoint, which botocore keeps private
        but stable since its 1.11 release.
        """
        session = client._endpoint.http_session
        pools = {
            "http": _pool_class(AWSHTTPConnectionPool, AWSHTTPConnection, self),
            "https": _pool_class(AWSHTTPSConnectionPool, AWSHTTPSConnection, self),
        }
        session._pool_classes_by_scheme = pools
        session._manager.pool_classes_by_scheme = pools

    def started(self, connection: Any, method: str, url: str, body_bytes: int) -> None:
        """A request begins on ``connection``: refuse it past the command deadline."""
        limit = self.request_deadline_s(body_bytes)
        cleanup = False
        if self.command_passed:
            left = self._cleanup_allowed(method)
            if left is None:
                self.cut = self._command_message()
                raise DeadlinePassedError(self.cut)
            limit, cleanup = min(limit, left), True
        with self._lock:
            if self._started is None:
                self._started = time.monotonic()
            self._running[connection] = (time.monotonic() + limit, f"{method} {url}", cleanup)
            if self._watchdog is None:
                self._watchdog = threading.Thread(
                    target=self._watch, name="aws-deadlines", daemon=True
                )
                self._watchdog.start()

    def finished(self, connection: Any) -> None:
        """``connection`` is back in its pool: its request is over."""
        with self._lock:
            self._running.pop(connection, None)

    def failure(self, error: CommandFailed) -> CommandFailed:
        """``error``, or when a deadline cut the command short, one line saying which."""
        if self.cut is None or isinstance(error, BadInput | Interrupted):
            return error
        return CommandFailed(
            f"stopped: {self.cut}; check the network, any proxy and AWS_ENDPOINT_URL "
            f"(EKS_INFERENCE_AWS_TIMEOUT and {DEADLINE_VARIABLE} set the limits)"
        )

    def _command_message(self) -> str:
        return f"the command's AWS deadline of {self.command_budget_s:g} s passed"

    def _watch(self) -> None:
        """Cut late requests until none is running; :meth:`started` starts it again."""
        while True:
            time.sleep(_WATCH_INTERVAL_S)
            now = time.monotonic()
            command_over = self.command_passed
            with self._lock:
                late = [
                    (connection, what)
                    for connection, (until, what, cleanup) in self._running.items()
                    if (command_over and not cleanup) or now > until
                ]
                for connection, _ in late:
                    self._running.pop(connection, None)
                idle = not self._running
                if idle:
                    self._watchdog = None
            for connection, what in late:
                if getattr(connection, "sock", None) is None:
                    # Closed by its own thread after a failure: nothing left to cut.
                    continue
                if command_over:
                    self.cut = self._command_message()
                else:
                    origin = f"{connection.host}:{connection.port}"
                    limit = self.request_deadline_s(0)
                    self.cut = (
                        f"a request to {origin} ({what.split(' ')[0]}) outlived its deadline "
                        f"of {limit:g} s plus 1 s per MiB sent (an endpoint answering a byte "
                        "at a time, or a link slower than 1 MiB/s)"
                    )
                _shut(connection)
            if idle:
                return


def _shut(connection: Any) -> None:
    """End the blocked send or read of ``connection`` from another thread."""
    sock = getattr(connection, "sock", None)
    if sock is None:
        return
    # OSError: already closed by its own thread.
    with suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def _pool_class(pool_base: type, connection_base: type, deadlines: Deadlines) -> type:
    """A connection pool class whose connections report to ``deadlines`` and refuse a
    response cut short (a request the watchdog cuts in its headers is one)."""

    class Connection(CompleteHeadConnection, connection_base):  # type: ignore[misc]
        def request(
            self,
            method: str,
            url: str,
            body: Any = None,
            headers: Any = None,
            *args: Any,
            **kwargs: Any,
        ) -> Any:
            length = (headers or {}).get("Content-Length", 0)
            try:
                body_bytes = int(length)
            except (TypeError, ValueError):
                body_bytes = 0
            deadlines.started(self, str(method), str(url), body_bytes)
            return super().request(method, url, body, headers, *args, **kwargs)

        def close(self) -> None:
            deadlines.finished(self)
            super().close()

    class Pool(pool_base):  # type: ignore[misc]
        ConnectionCls = Connection

        def _put_conn(self, conn: Any) -> None:
            if conn is not None:
                deadlines.finished(conn)
            super()._put_conn(conn)

    return Pool
