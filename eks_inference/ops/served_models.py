"""Asking a deployed OpenAI-compatible endpoint which models it serves (``models``).

``GET <base URL>/models`` with ``Authorization: Bearer <key>``, the key read from an
environment variable (never from the command line, where it would land in the shell's
history and the process list). The base URL is the one the stack prints
(``BaseUrl-<deployment>``: ``http(s)://<host>/<deployment>/v1``).

Bounded in time and memory: the connection must open within ``connect_timeout`` seconds,
every read return within ``read_timeout``, and the whole exchange (name lookup, connection,
request, answer) end within ``deadline``, so that a server answering a byte at a time cannot
keep the command running; at most :data:`MAX_RESPONSE_BYTES` are read, JSON nested deeper
than :data:`MAX_JSON_DEPTH` is refused before it is parsed, and no redirect is followed.
Whatever the server sends (error bodies, reason phrases, model ids) is printed only through
:mod:`eks_inference.ops.text`: bounded, escapes shown escaped, and with the key redacted
should the server echo it. Every failure is one line: bad input (a malformed URL or host, a
missing key) exits with 2, an endpoint that cannot be reached or answers wrongly with 1.
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import json
import os
import re
import socket
import ssl
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

from eks_inference.ops.errors import BadInput, CommandFailed
from eks_inference.ops.text import quote_external, redact_url

# A model list is a few hundred bytes per model; anything past this is not one.
MAX_RESPONSE_BYTES = 1024 * 1024
# A model list nests three levels ({"data": [{...}]}); an OpenAI error body two. Deeper input
# is refused before parsing, as Python's parser would exhaust its recursion limit on it.
MAX_JSON_DEPTH = 64
_USER_AGENT = "eks-inference-cli"
# DNS limits (RFC 1035): 63 characters a label, 253 a name.
_MAX_LABEL = 63
_MAX_HOST = 253
_LABEL = re.compile(r"[A-Za-z0-9_-]+")
# Characters a path may hold as they are (RFC 3986 pchar and '/', '%' of existing escapes);
# anything else (non-ASCII, spaces, controls) is percent-encoded as UTF-8, as browsers do.
_PATH_SAFE = "/%!$&'()*+,;=:@-._~"
# What the depth check looks at: escaped pairs (skipped whole, so an escaped quote does not
# end a string), quotes and brackets. One pass, linear in the body.
_JSON_TOKEN = re.compile(r'\\.|["\[\]{}]', re.DOTALL)


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
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{host}{port}{self.path}"


@dataclass(frozen=True)
class ServedModel:
    """One entry of the endpoint's model list."""

    id: str
    owned_by: str | None
    max_model_len: int | None
    #: The base model of a LoRA adapter (vLLM lists each adapter with its ``parent``);
    #: ``None`` for a base model.
    parent: str | None = None


def models_endpoint(base_url: str) -> Endpoint:
    """The ``/models`` endpoint below ``base_url`` (``http(s)://host[:port]/path/v1``).

    Raises :class:`BadInput` for anything but an http(s) URL with a valid host name or IP
    address and no query, fragment or credentials. A non-ASCII host is sent in its IDNA
    form and a path's non-ASCII characters percent-encoded, as a browser would. The URL is
    quoted in errors without its credentials.
    """
    shown = repr(redact_url(base_url))
    try:
        parts = urlsplit(base_url)
        port = parts.port
    except ValueError as error:
        raise BadInput(f"--url {shown} is not a URL: {quote_external(str(error))}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadInput(
            f"--url {shown} must be an http(s) URL with a host, such as the stack's "
            "BaseUrl output (http://<load balancer>/<deployment>/v1)"
        )
    if parts.query or parts.fragment or "@" in parts.netloc:
        raise BadInput(
            f"--url {shown} must have no query, fragment or credentials; the key is read "
            "from --api-key-env"
        )
    if port == 0:
        raise BadInput(f"--url {shown} has port 0; give the load balancer's port or none")
    secure = parts.scheme == "https"
    return Endpoint(
        secure=secure,
        host=_ascii_host(parts.hostname, shown),
        port=port or (443 if secure else 80),
        path=quote(f"{parts.path.rstrip('/')}/models", safe=_PATH_SAFE),
    )


def _ascii_host(host: str, shown: str) -> str:
    """``host`` as it goes on the wire: an IP address, or a DNS name in ASCII (IDNA)."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    problem = f"--url {shown}: the host {host!r}"
    if any(c.isspace() for c in host):
        raise BadInput(f"{problem} has whitespace in it")
    labels = host.removesuffix(".").split(".")
    if any(not label for label in labels):
        raise BadInput(f"{problem} has an empty label (two dots in a row, or a leading dot)")
    try:
        encoded = [
            label if label.isascii() else label.encode("idna").decode("ascii") for label in labels
        ]
    except UnicodeError:
        raise BadInput(f"{problem} is not a valid international domain name") from None
    for label in encoded:
        if len(label) > _MAX_LABEL:
            raise BadInput(
                f"{problem} has a label of {len(label)} characters; DNS allows {_MAX_LABEL}"
            )
        if not _LABEL.fullmatch(label) or label.startswith("-") or label.endswith("-"):
            raise BadInput(
                f"{problem} has a label {label!r} that is not letters, digits and inner hyphens"
            )
    name = ".".join(encoded)
    if len(name) > _MAX_HOST:
        raise BadInput(f"{problem} is {len(name)} characters long; DNS allows {_MAX_HOST}")
    # A trailing dot (a fully qualified name, not subject to the resolver's search list) stays.
    return f"{name}." if host.endswith(".") else name


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
    deadline: float,
) -> list[ServedModel]:
    """``GET`` the model list; :class:`CommandFailed` (one line) for any failure.

    The key is redacted from everything the server sends before it is returned or quoted.
    """
    secrets = () if api_key is None else (api_key,)
    status, reason, body = _exchange(endpoint, api_key, connect_timeout, read_timeout, deadline)
    if status != http.client.OK:
        raise CommandFailed(_refusal(endpoint, status, reason, body, secrets))
    return _parse_models(endpoint, body, secrets)


def _exchange(
    endpoint: Endpoint,
    api_key: str | None,
    connect_timeout: float,
    read_timeout: float,
    deadline: float,
) -> tuple[int, str, bytes]:
    """:func:`_get` on a worker thread, given up on after ``deadline`` seconds.

    Socket timeouts bound each wait, not their sum, and do not bound the name lookup at all;
    the deadline bounds everything. When it passes, the socket is shut down so that the
    blocked read ends, and the worker (a daemon) is left to finish on its own.
    """
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
    outcome: list[tuple[int, str, bytes]] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            outcome.append(_get(connection, endpoint, api_key, connect_timeout, read_timeout))
        except BaseException as error:  # handed to the waiting thread, which raises it
            failure.append(error)
        finally:
            connection.close()

    worker = threading.Thread(target=run, name="eks-inference-models", daemon=True)
    worker.start()
    worker.join(deadline)
    if worker.is_alive():
        sock = connection.sock
        if sock is not None:
            # The plain socket's shutdown: it wakes the blocked read without touching the TLS
            # state the worker is using.
            with contextlib.suppress(OSError):
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
        raise CommandFailed(
            f"{endpoint.url} did not finish answering within {deadline:g} s (--deadline)"
        )
    if failure:
        raise failure[0]
    return outcome[0]


def _get(
    connection: http.client.HTTPConnection,
    endpoint: Endpoint,
    api_key: str | None,
    connect_timeout: float,
    read_timeout: float,
) -> tuple[int, str, bytes]:
    headers = {"Accept": "application/json", "User-Agent": _USER_AGENT}
    if api_key is not None:
        headers["Authorization"] = f"Bearer {api_key}"
    try:
        connection.connect()
    except TimeoutError:
        raise CommandFailed(
            f"could not connect to {endpoint.url} within {connect_timeout:g} s "
            "(is the load balancer reachable from this network?)"
        ) from None
    except ssl.SSLError as error:
        raise CommandFailed(
            f"TLS with {endpoint.url} failed: {quote_external(str(error))}"
        ) from None
    except OSError as error:
        raise CommandFailed(f"could not connect to {endpoint.url}: {_reason(error)}") from None
    if connection.sock is not None:
        connection.sock.settimeout(read_timeout)
    try:
        connection.request("GET", endpoint.path, headers=headers)
        response = connection.getresponse()
        body = response.read(MAX_RESPONSE_BYTES + 1)
    except TimeoutError:
        raise CommandFailed(f"{endpoint.url} sent no response within {read_timeout:g} s") from None
    except (OSError, http.client.HTTPException) as error:
        raise CommandFailed(f"GET {endpoint.url} failed: {_reason(error)}") from None
    if len(body) > MAX_RESPONSE_BYTES:
        raise CommandFailed(
            f"{endpoint.url} answered with more than {MAX_RESPONSE_BYTES} bytes; "
            "that is not a model list"
        )
    return response.status, response.reason, body


def _reason(error: BaseException) -> str:
    if isinstance(error, socket.gaierror):
        return f"the host name does not resolve ({error.strerror})"
    return quote_external(str(error)) or type(error).__name__


def _refusal(
    endpoint: Endpoint, status: int, reason: str, body: bytes, secrets: tuple[str, ...]
) -> str:
    detail = _error_message(body, secrets)
    suffix = f": {detail}" if detail else ""
    answered = f"{endpoint.url} answered {status} {quote_external(reason, secrets=secrets)}"
    if status == http.client.UNAUTHORIZED:
        hint = "the API key was refused" if secrets else "the endpoint requires an API key"
        return f"{answered}, {hint}{suffix}"
    if status == http.client.NOT_FOUND:
        return f"{answered}: is --url the deployment's base URL, ending in /v1?{suffix}"
    return f"{answered}{suffix}"


class _TooDeepError(ValueError):
    """JSON nested deeper than :data:`MAX_JSON_DEPTH`."""


def _load_json(body: bytes) -> Any:
    """``body`` parsed as JSON; ``ValueError`` if it is not JSON or nests too deeply."""
    text = body.decode("utf-8")
    depth = 0
    in_string = False
    for match in _JSON_TOKEN.finditer(text):
        token = match.group()
        if token == '"':
            in_string = not in_string
        elif in_string or token[0] == "\\":
            continue
        elif token in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                raise _TooDeepError
        else:
            depth -= 1
    return json.loads(text)


def _error_message(body: bytes, secrets: tuple[str, ...]) -> str:
    """The message of an error body, or the start of the body, as one quotable line.

    OpenAI's shape (``{"error": {"message": ..., "code": ...}}``, what the platform's servers
    answer with 401) gives its message and code; vLLM's ``{"error": "..."}`` and FastAPI's
    ``{"detail": "..."}`` their string.
    """
    text = body.decode("utf-8", errors="replace")
    try:
        payload: Any = _load_json(body)
    except ValueError:
        payload = None
    if isinstance(payload, dict):
        error = payload.get("error", payload.get("detail"))
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            code = error.get("code")
            text = error["message"] + (f" ({code})" if isinstance(code, str) and code else "")
        elif isinstance(error, str):
            text = error
    return quote_external(text, secrets=secrets)


def _parse_models(endpoint: Endpoint, body: bytes, secrets: tuple[str, ...]) -> list[ServedModel]:
    try:
        payload: Any = _load_json(body)
    except _TooDeepError:
        raise CommandFailed(
            f"{endpoint.url} answered JSON nested deeper than {MAX_JSON_DEPTH} levels; "
            "that is not a model list"
        ) from None
    except ValueError:
        raise CommandFailed(
            f"{endpoint.url} did not answer with JSON: {_error_message(body, secrets)!r}"
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
            # Names as printed: the key redacted, escapes shown escaped, the length bounded (an
            # id is a Hugging Face repository name, well under the limit).
            id=quote_external(model["id"], secrets=secrets),
            owned_by=(
                quote_external(model["owned_by"], secrets=secrets)
                if isinstance(model.get("owned_by"), str)
                else None
            ),
            max_model_len=(
                model["max_model_len"]
                if isinstance(model.get("max_model_len"), int)
                and not isinstance(model.get("max_model_len"), bool)
                else None
            ),
            parent=(
                quote_external(model["parent"], secrets=secrets)
                if isinstance(model.get("parent"), str)
                else None
            ),
        )
        for model in data
    ]
