"""``models``: ask a deployed OpenAI-compatible endpoint which models it serves.

``GET <base URL>/models`` with ``Authorization: Bearer <key>``, the key read from an
environment variable (never from the command line, where it would land in the shell's
history and the process list). The base URL is the one the stack prints
(``BaseUrl-<deployment>``: ``http(s)://<host>/<deployment>/v1``).

Bounded in time and memory: the connection must open within ``connect_timeout`` seconds and
every read return within ``read_timeout``; at most :data:`MAX_RESPONSE_BYTES` are read; no
redirect is followed. Every failure is one line: bad input (a malformed URL, a missing key)
exits with 2, an endpoint that cannot be reached or answers wrongly with 1.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from rich.markup import escape
from rich.table import Table

from eks_inference.cli.errors import BadInput, CommandFailed

# A model list is a few hundred bytes per model; anything past this is not one.
MAX_RESPONSE_BYTES = 1024 * 1024
_USER_AGENT = "eks-inference-cli"
# Characters of an error body worth showing on the one line of a failure.
_MAX_DETAIL = 200


@dataclass(frozen=True)
class Endpoint:
    """Where the models are asked for: ``https``, host, port and the ``.../models`` path."""

    secure: bool
    host: str
    port: int
    path: str

    @property
    def url(self) -> str:
        scheme = "https" if self.secure else "http"
        default = 443 if self.secure else 80
        port = "" if self.port == default else f":{self.port}"
        return f"{scheme}://{self.host}{port}{self.path}"


@dataclass(frozen=True)
class ServedModel:
    """One entry of the endpoint's model list."""

    id: str
    owned_by: str | None
    max_model_len: int | None


def models_endpoint(base_url: str) -> Endpoint:
    """The ``/models`` endpoint below ``base_url`` (``http(s)://host[:port]/path/v1``).

    Raises :class:`BadInput` for anything but an http(s) URL with a host and no query,
    fragment or credentials.
    """
    try:
        parts = urlsplit(base_url)
        port = parts.port
    except ValueError as error:
        raise BadInput(f"--url {base_url!r} is not a URL: {error}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadInput(
            f"--url {base_url!r} must be an http(s) URL with a host, such as the stack's "
            "BaseUrl output (http://<load balancer>/<deployment>/v1)"
        )
    if parts.query or parts.fragment or parts.username or parts.password:
        raise BadInput(
            f"--url {base_url!r} must have no query, fragment or credentials; the key is read "
            "from --api-key-env"
        )
    secure = parts.scheme == "https"
    return Endpoint(
        secure=secure,
        host=parts.hostname,
        port=port or (443 if secure else 80),
        path=f"{parts.path.rstrip('/')}/models",
    )


def api_key_from(variable: str) -> str:
    """The key in environment variable ``variable``; :class:`BadInput` when unset or empty."""
    key = os.environ.get(variable, "")
    if not key:
        raise BadInput(
            f"environment variable {variable} is unset or empty: export the endpoint's API key "
            "there (the stack's ApiKeyCommand output prints it), name another variable with "
            "--api-key-env, or pass --no-api-key for an endpoint without authentication"
        )
    if any(ord(c) < 0x21 or ord(c) > 0x7E for c in key):
        raise BadInput(f"the API key in {variable} has whitespace or non-ASCII characters")
    return key


def list_models(
    endpoint: Endpoint,
    api_key: str | None,
    *,
    connect_timeout: float,
    read_timeout: float,
) -> list[ServedModel]:
    """``GET`` the model list; :class:`CommandFailed` (one line) for any failure."""
    status, reason, body = _get(endpoint, api_key, connect_timeout, read_timeout)
    if status != http.client.OK:
        raise CommandFailed(_refusal(endpoint, status, reason, body, api_key is not None))
    return _parse_models(endpoint, body)


def _get(
    endpoint: Endpoint, api_key: str | None, connect_timeout: float, read_timeout: float
) -> tuple[int, str, bytes]:
    connection: http.client.HTTPConnection
    if endpoint.secure:
        connection = http.client.HTTPSConnection(
            endpoint.host,
            endpoint.port,
            timeout=connect_timeout,
            context=ssl.create_default_context(),
        )
    else:
        connection = http.client.HTTPConnection(
            endpoint.host, endpoint.port, timeout=connect_timeout
        )
    headers = {"Accept": "application/json", "User-Agent": _USER_AGENT}
    if api_key is not None:
        headers["Authorization"] = f"Bearer {api_key}"
    try:
        try:
            connection.connect()
        except TimeoutError:
            raise CommandFailed(
                f"could not connect to {endpoint.url} within {connect_timeout:g} s "
                "(is the load balancer reachable from this network?)"
            ) from None
        except ssl.SSLError as error:
            raise CommandFailed(f"TLS with {endpoint.url} failed: {error}") from None
        except OSError as error:
            raise CommandFailed(f"could not connect to {endpoint.url}: {_reason(error)}") from None
        if connection.sock is not None:
            connection.sock.settimeout(read_timeout)
        try:
            connection.request("GET", endpoint.path, headers=headers)
            response = connection.getresponse()
            body = response.read(MAX_RESPONSE_BYTES + 1)
        except TimeoutError:
            raise CommandFailed(
                f"{endpoint.url} sent no response within {read_timeout:g} s"
            ) from None
        except (OSError, http.client.HTTPException) as error:
            raise CommandFailed(f"GET {endpoint.url} failed: {_reason(error)}") from None
        if len(body) > MAX_RESPONSE_BYTES:
            raise CommandFailed(
                f"{endpoint.url} answered with more than {MAX_RESPONSE_BYTES} bytes; "
                "that is not a model list"
            )
        return response.status, response.reason, body
    finally:
        connection.close()


def _reason(error: BaseException) -> str:
    if isinstance(error, socket.gaierror):
        return f"the host name does not resolve ({error.strerror})"
    return str(error) or type(error).__name__


def _refusal(endpoint: Endpoint, status: int, reason: str, body: bytes, sent_key: bool) -> str:
    detail = _error_message(body)
    suffix = f": {detail}" if detail else ""
    if status == http.client.UNAUTHORIZED:
        hint = "the API key was refused" if sent_key else "the endpoint requires an API key"
        return f"{endpoint.url} answered {status} {reason}, {hint}{suffix}"
    if status == http.client.NOT_FOUND:
        return (
            f"{endpoint.url} answered 404 {reason}: is --url the deployment's base URL, "
            f"ending in /v1?{suffix}"
        )
    return f"{endpoint.url} answered {status} {reason}{suffix}"


def _error_message(body: bytes) -> str:
    """The message of an OpenAI-shaped error body, or the start of the body, on one line."""
    text = body.decode("utf-8", errors="replace")
    try:
        payload: Any = json.loads(text)
    except ValueError:
        payload = None
    if isinstance(payload, dict):
        error = payload.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            text = error["message"]
        elif isinstance(error, str):
            text = error
    line = " ".join(text.split())
    return line if len(line) <= _MAX_DETAIL else f"{line[: _MAX_DETAIL - 3]}..."


def _parse_models(endpoint: Endpoint, body: bytes) -> list[ServedModel]:
    try:
        payload: Any = json.loads(body)
    except ValueError:
        raise CommandFailed(
            f"{endpoint.url} did not answer with JSON: {_error_message(body)!r}"
        ) from None
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, list) or not all(
        isinstance(m, dict) and isinstance(m.get("id"), str) for m in data
    ):
        raise CommandFailed(
            f"{endpoint.url} answered JSON that is not an OpenAI model list "
            '({"object": "list", "data": [{"id": ...}]})'
        )
    return [
        ServedModel(
            id=model["id"],
            owned_by=model["owned_by"] if isinstance(model.get("owned_by"), str) else None,
            max_model_len=(
                model["max_model_len"]
                if isinstance(model.get("max_model_len"), int)
                and not isinstance(model.get("max_model_len"), bool)
                else None
            ),
        )
        for model in data
    ]


def models_table(endpoint: Endpoint, models: list[ServedModel]) -> Table:
    """The served models, one row each, under a title naming the endpoint."""
    table = Table(title=f"{endpoint.url}: {len(models)} served", title_justify="left")
    table.add_column("model", no_wrap=True)
    table.add_column("owned by", no_wrap=True)
    table.add_column("max model len", justify="right", no_wrap=True)
    for model in models:
        table.add_row(
            escape(model.id),
            escape(model.owned_by or "-"),
            "-" if model.max_model_len is None else f"{model.max_model_len:,}",
        )
    return table
