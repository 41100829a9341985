"""One writer per prefix: a lease held in a lock object beside the prefix.

Two uploads to one prefix at once would delete each other's manifest and objects and abort
each other's multipart uploads, so ``upload`` first takes a lease: it creates the lock object
``<prefix without its final '/'>.eks-inference-upload.lock`` with an S3 conditional write
(``If-None-Match: *``), which exactly one of two racing writers wins. The lock lies beside
the prefix rather than inside it, so no listing of the prefix (the upload's comparison,
``--delete``, preflight, a server syncing the weights) ever sees it. A prefix inside another
(``models/a/b/`` in ``models/a/``) shares objects with it, so a run also refuses while a run on
a prefix around or inside its own holds a live lease; the upload never counts the lock of a
prefix inside its own as one of its objects.

The lock names its owner (host, process id, a random id) and when the lease expires. Times
are S3's own (the lock's ``LastModified`` and the ``Date`` of S3's answers), so two hosts
with skewed clocks agree on whether a lease is live. A live lease refuses a second writer;
an expired one is taken over with a write conditional on the lock's ETag (``If-Match``), so
two runs cannot both take it over. A lease whose owner ran on this host and whose process is
gone is taken over at once: a killed run then resumes without waiting for the expiry.

The lease lasts :data:`LEASE_S` and is renewed every :data:`RENEW_EVERY_S` while the upload
runs, so a run that dies stops blocking the prefix within minutes whatever the upload's size,
and a renewal may fail a few times (a network hiccup) before the lease is at risk. Each step
that changes what the prefix means (removing the manifest, deleting objects, writing the
manifest) first renews it: a run that lost its lease stops before it can contradict the run
that holds it. The lease is removed at the end, also after Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import threading
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from eks_inference.ops.aws.errors import aws_errors, describe_error, error_code, is_not_found
from eks_inference.ops.errors import CommandFailed
from eks_inference.ops.s3uri import S3Prefix

LOCK_SUFFIX = ".eks-inference-upload.lock"
LEASE_S = 300
RENEW_EVERY_S = 60
# The longest lease a lock may claim and still be honoured: room for a later version to lease
# for longer, while a lock claiming more (or no number at all), written by mistake or by
# someone hostile, holds the prefix only :data:`LEASE_S` after its last write, as an
# unreadable lock does.
MAX_LEASE_S = 3600
# Conditional-write refusals: the condition failed (412), or another conditional write to the
# same key was in flight (409, S3's answer to a race of two).
_LOST_RACE = {"PreconditionFailed", "412", "ConditionalRequestConflict", "409"}
# Attempts at taking the lease when the lock vanishes between the failed create and the read.
_ATTEMPTS = 3


class LeaseOwner(BaseModel):
    """Who holds a lease: the host (and its process namespace), the process, a random id."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str
    pid_namespace: str | None
    pid: int
    id: str


class LeaseRecord(BaseModel):
    """The lock object's content."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format: int = 1
    owner: LeaseOwner
    created: datetime
    expires: datetime
    duration_s: float = Field(gt=0, le=MAX_LEASE_S, allow_inf_nan=False)


def lock_key(target: S3Prefix) -> str:
    """The lock object's key: the prefix without its final ``/``, plus :data:`LOCK_SUFFIX`."""
    return target.prefix.removesuffix("/") + LOCK_SUFFIX


def _pid_namespace() -> str | None:
    """The process namespace (Linux), so that two containers of one host never mix pids."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def this_owner() -> LeaseOwner:
    """The owner record of this process, with a fresh random id."""
    return LeaseOwner(
        host=socket.gethostname(),
        pid_namespace=_pid_namespace(),
        pid=os.getpid(),
        id=secrets.token_hex(8),
    )


def _is_dead_here(owner: LeaseOwner) -> bool:
    """True when ``owner`` ran in this host's process namespace and its process is gone."""
    here = this_owner()
    if owner.host != here.host or owner.pid_namespace != here.pid_namespace:
        return False
    try:
        os.kill(owner.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        # Alive, and someone else's.
        return False
    return False


def _server_time(response: dict[str, Any]) -> datetime:
    """S3's clock at the time of an answer (its ``Date`` header), to the second.

    An answer without a readable, zoned ``Date`` (a proxy's garbage) falls back to this
    machine's clock: only the skew protection is lost, never the lease.
    """
    date = response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    try:
        parsed = parsedate_to_datetime(str(date)) if date else None
    except (TypeError, ValueError):
        parsed = None
    if parsed is None or parsed.tzinfo is None:
        return datetime.now(UTC)
    return parsed.astimezone(UTC)


@dataclass
class _Existing:
    record: LeaseRecord | None
    etag: str
    expires: datetime
    now: datetime


@dataclass
class Lease:
    """A lease held on a prefix; renew it while working, release it at the end."""

    client: Any
    target: S3Prefix
    owner: LeaseOwner
    etag: str
    taken_at: datetime
    """S3's time when the lease was taken."""
    previous_expiry: datetime | None
    """When the lease taken over had expired or would have (S3's time); None if there was none."""
    taken_over: LeaseOwner | None
    """The owner of the lease taken over, or None when the prefix was free."""
    created: datetime = field(default_factory=lambda: datetime.now(UTC))
    """When this lease was taken; kept across renewals."""
    lost: str | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _renewer: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def uri(self) -> str:
        """The lock object's ``s3://`` URI."""
        return f"s3://{self.target.bucket}/{lock_key(self.target)}"

    @property
    def stale_before(self) -> datetime:
        """Multipart uploads initiated before this (S3's time) belong to runs now gone.

        Before the lease was taken, and before the previous lease expired: an upload started
        after that expiry comes from a run that kept writing without its lease, and is left
        to it (and to the bucket's lifecycle rule).
        """
        if self.previous_expiry is None:
            return self.taken_at
        return min(self.taken_at, self.previous_expiry)

    def renew(self) -> None:
        """Extend the lease, conditional on still holding it; fail if it was taken over."""
        with self._lock:
            if self.lost is not None:
                raise CommandFailed(self.lost)
            try:
                self.etag, _ = _write(
                    self.client, self.target, self.owner, if_match=self.etag, created=self.created
                )
            except Exception as error:
                if error_code(error) in _LOST_RACE or is_not_found(error):
                    self.lost = (
                        f"the lease {self.uri} was taken over by another upload (this run "
                        "could not renew it in time); this run stopped before changing the "
                        "manifest, re-run once the other upload has finished"
                    )
                    raise CommandFailed(self.lost) from None
                raise CommandFailed(
                    f"cannot renew the lease {self.uri}: {describe_error(error, 'S3')}"
                ) from None

    def start_renewing(self) -> None:
        """Renew the lease every :data:`RENEW_EVERY_S` in a background thread."""

        def renew_loop() -> None:
            while not self._stop.wait(RENEW_EVERY_S):
                try:
                    self.renew()
                except CommandFailed:
                    # A failed renewal is retried next time; a lost lease is reported by the
                    # renewal each change of the prefix makes first.
                    if self.lost is not None:
                        return

        self._renewer = threading.Thread(target=renew_loop, name="upload-lease", daemon=True)
        self._renewer.start()

    def release(self) -> None:
        """Stop renewing and remove the lock, unless another run has taken it over.

        A lock that cannot be removed (a network failure) expires by itself within
        :data:`LEASE_S`, and sooner for a re-run on this host.
        """
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
        if self.lost is not None:
            return
        # The condition keeps a lock another run has taken over since; any failure leaves a
        # lock that expires by itself.
        with suppress(Exception):
            self.client.delete_object(
                Bucket=self.target.bucket, Key=lock_key(self.target), IfMatch=self.etag
            )


def _write(
    client: Any,
    target: S3Prefix,
    owner: LeaseOwner,
    *,
    if_match: str | None = None,
    created: datetime | None = None,
) -> tuple[str, datetime]:
    """Write the lock conditionally: create it, or replace the version ``if_match`` names.

    Returns the new ETag and S3's time of the write.
    """
    now = datetime.now(UTC)
    record = LeaseRecord(
        owner=owner,
        created=created or now,
        expires=now + timedelta(seconds=LEASE_S),
        duration_s=LEASE_S,
    )
    condition = {"IfMatch": if_match} if if_match is not None else {"IfNoneMatch": "*"}
    response = client.put_object(
        Bucket=target.bucket,
        Key=lock_key(target),
        Body=json.dumps(record.model_dump(mode="json")).encode(),
        ContentType="application/json",
        **condition,
    )
    return str(response["ETag"]), _server_time(response)


def _read(client: Any, target: S3Prefix) -> _Existing | None:
    """The lock of ``target`` as it is now, or None when there is none."""
    try:
        response = client.get_object(Bucket=target.bucket, Key=lock_key(target))
    except Exception as error:
        if is_not_found(error):
            return None
        raise
    body = response["Body"].read(64 * 1024)
    try:
        record: LeaseRecord | None = LeaseRecord.model_validate_json(body)
    except ValidationError:
        record = None
    modified = response["LastModified"].astimezone(UTC)
    duration = record.duration_s if record is not None else LEASE_S
    return _Existing(
        record=record,
        etag=str(response["ETag"]),
        expires=modified + timedelta(seconds=duration),
        now=_server_time(response),
    )


def _refusal(target: S3Prefix, existing: _Existing, overlapping: S3Prefix | None = None) -> str:
    """Why ``existing``, the live lease on ``target``, refuses this run.

    ``overlapping`` is this run's prefix when it is not ``target`` but one inside or around it.
    """
    uri = f"s3://{target.bucket}/{lock_key(target)}"
    until = f"{existing.expires:%Y-%m-%d %H:%M:%S} UTC"
    overlap = f", a prefix overlapping {overlapping}" if overlapping is not None else ""
    if existing.record is None:
        return (
            f"{uri} holds a lease this version cannot read, live until {until}; another "
            f"upload to {target}{overlap} may be running, nothing was sent"
        )
    owner = existing.record.owner
    return (
        f"another upload holds the lease on {target}{overlap} (host {owner.host}, pid "
        f"{owner.pid}, id {owner.id}) until {until}, renewed while it runs; nothing was sent. "
        f"Wait for it to finish, or if it is dead for the lease to expire ({uri})"
    )


def _is_live(existing: _Existing) -> bool:
    """True while a lease has not expired (S3's time) and its owner is not known dead."""
    dead = existing.record is not None and _is_dead_here(existing.record.owner)
    return existing.now < existing.expires and not dead


def _prefixes_around(target: S3Prefix) -> list[S3Prefix]:
    """Every shorter prefix ending at a ``/`` of ``target``: ``models/`` for ``models/a/``."""
    parts = target.prefix.removesuffix("/").split("/")
    return [S3Prefix(target.bucket, "/".join(parts[:n]) + "/") for n in range(1, len(parts))]


def _prefixes_inside(client: Any, target: S3Prefix) -> list[S3Prefix]:
    """The prefixes inside ``target`` whose lock object exists, found by listing ``target``."""
    return [
        S3Prefix(target.bucket, item["Key"].removesuffix(LOCK_SUFFIX) + "/")
        for page in client.get_paginator("list_objects_v2").paginate(
            Bucket=target.bucket, Prefix=target.prefix
        )
        for item in page.get("Contents", [])
        if item["Key"].endswith(LOCK_SUFFIX)
    ]


def refuse_overlapping(client: Any, target: S3Prefix) -> None:
    """Fail while an upload to a prefix around or inside ``target`` holds a live lease.

    Their objects are partly the same: the run on the outer prefix lists the inner run's
    objects as its own, and would delete them (``--delete``) or abort its multipart uploads
    as stale. Called once this run holds its own lease, as the other run does once it holds
    its own: of two overlapping runs, at least one sees the other's lease and stops. A lock
    around the prefix that these credentials may not read is passed over: credentials
    granted only this prefix are not the ones uploading to a prefix around it, and that
    run, which can list this prefix, still sees this run's lease.
    """
    with aws_errors(f"look for uploads overlapping {target}"):
        found: list[tuple[S3Prefix, _Existing | None]] = []
        for around in _prefixes_around(target):
            try:
                found.append((around, _read(client, around)))
            except Exception as error:
                if error_code(error) not in {"403", "AccessDenied"}:
                    raise
        found += [(inside, _read(client, inside)) for inside in _prefixes_inside(client, target)]
    for other, existing in found:
        if existing is not None and _is_live(existing):
            raise CommandFailed(_refusal(other, existing, overlapping=target))


def acquire(client: Any, target: S3Prefix) -> Lease:
    """Take the lease on ``target``, or fail with one line naming who holds it and until when."""
    owner = this_owner()
    with aws_errors(f"take the upload lease s3://{target.bucket}/{lock_key(target)}"):
        for _ in range(_ATTEMPTS):
            try:
                etag, now = _write(client, target, owner)
            except Exception as error:
                if error_code(error) not in _LOST_RACE:
                    raise
            else:
                return Lease(client, target, owner, etag, now, None, None, created=now)
            existing = _read(client, target)
            if existing is None:
                continue
            if _is_live(existing):
                raise CommandFailed(_refusal(target, existing))
            try:
                etag, now = _write(client, target, owner, if_match=existing.etag)
            except Exception as error:
                if error_code(error) not in _LOST_RACE and not is_not_found(error):
                    raise
                continue
            previous = existing.record.owner if existing.record is not None else None
            return Lease(client, target, owner, etag, now, existing.expires, previous, created=now)
    raise CommandFailed(
        f"cannot take the upload lease on {target}: other runs keep taking it; nothing was sent"
    )
