"""Small wording helpers shared by the commands' messages, and the one place text from outside
the CLI is made safe to quote and print (the consoles of :mod:`eks_inference.cli.console` pass
everything they print through :func:`printable` and :func:`redact_urls`)."""

from __future__ import annotations

import re
from collections.abc import Iterable

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def format_bytes(size: float) -> str:
    """``1536`` -> ``1.5 KiB``: binary units, one decimal, the largest unit below 1024."""
    value = float(size)
    for unit in _UNITS[:-1]:
        if abs(value) < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} {_UNITS[-1]}"


def plural(count: int, noun: str) -> str:
    """``plural(1, "file")`` -> ``1 file``; ``plural(2, "file")`` -> ``2 files``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


# -- text from outside (servers, S3 listings, AWS messages, file names) ----------------------
#
# Anything the CLI did not write itself may carry terminal escapes, bidi overrides or secrets.
# Every printer (the error line in ``cli.main``, the consoles of ``cli.console``) passes its
# text through ``cli.console.terminal_safe``; text quoted into a one-line message goes through
# :func:`quote_external` first, which also bounds it.

MAX_QUOTED_CHARS = 200
"""Longest piece of outside text quoted in a message: enough for a server's error sentence,
short enough that the line it sits in stays one line of a log."""

REDACTED = "***"

# Values shorter than this are no secret worth the name, and replacing every occurrence of,
# say, "ab" would garble the line more than it protects.
_MIN_SECRET_CHARS = 4

# A URL in free text: the scheme, then the authority (where ``user:password@`` sits), then the
# path, query and fragment. Quotes and angle brackets end it, as they delimit it in messages.
_URL = re.compile(
    r"\b(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<authority>[^\s\"<>/?#]*)"
    r"(?P<path>[^\s\"'<>?#]*)(?P<query>\?[^\s\"'<>#]*)?(?P<fragment>#[^\s\"'<>]*)?"
)
# A credential header (or a field named like one) echoed back by a server, and its value. A
# ``<placeholder>`` after the scheme word is an instruction to the reader, not a value.
_ECHOED_CREDENTIAL = re.compile(
    r"(?i)\b(?P<name>authorization|proxy-authorization|x-api-key|api[-_]key|"
    r"x-amz-security-token|cookie)(?P<sep>[\"']?\s*[:=]\s*[\"']?)"
    r"(?!(?:bearer|basic|aws4-hmac-sha256)\s+<)"
    r"(?P<value>(?:(?:bearer|basic|aws4-hmac-sha256)\s+)?[^\s\"',;}<>]+)"
)


def printable(text: str, *, keep_lines: bool = False) -> str:
    """``text`` with every character ``repr()`` would escape shown escaped (``\\x1b``).

    That is control characters (ESC starts the terminal's escape sequences, CR and backspace
    overwrite what was printed), format characters (bidi overrides reorder a line, zero-width
    ones hide text), line separators and lone surrogates (undecodable bytes of a file name,
    which would make printing itself fail). Escaped rather than dropped, so the operator sees
    that something odd was there. ``keep_lines`` keeps newlines and tabs, for text that is
    laid out in several lines on purpose (a listing).
    """
    if text.isprintable():
        return text
    kept = "\n\t" if keep_lines else ""
    return "".join(
        c if c.isprintable() or c in kept else c.encode("unicode_escape").decode("ascii")
        for c in text
    )


def redact_url(url: str) -> str:
    """``url`` without what may be a secret: the ``user:password@`` part is dropped, and the
    values of the query and the fragment are replaced by ``***`` (a presigned URL's signature
    and token live there); the parameter names stay, so the shape remains readable.

    Text that is not a URL is returned as is; :func:`redact_urls` treats every URL in a
    message.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority, tail = rest[:end], rest[end:]
    tail, hash_, fragment = tail.partition("#")
    path, question, query = tail.partition("?")
    return (
        f"{scheme}://{authority.rpartition('@')[2]}{path}"
        f"{question}{_redact_query(query) if question else ''}"
        f"{hash_}{REDACTED if fragment else ''}"
    )


def redact_urls(text: str) -> str:
    """Every URL in ``text`` passed through :func:`redact_url`."""
    if "://" not in text:
        return text
    return _URL.sub(lambda m: redact_url(m.group(0)), text)


def _redact_query(query: str) -> str:
    return "&".join(
        f"{name}={REDACTED}" if sep else name
        for name, sep, _ in (field.partition("=") for field in query.split("&"))
    )


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with each of ``secrets`` and any echoed credential header value replaced by
    ``***``.

    ``secrets`` are the values the command holds (the API key): a server that echoes the
    request back must not make the CLI print them. Credential headers (``Authorization:``,
    ``X-Amz-Security-Token:``...) are redacted by shape, for secrets the CLI never saw itself
    (a session token from a credentials provider).
    """
    for secret in sorted(set(secrets), key=len, reverse=True):
        if len(secret) >= _MIN_SECRET_CHARS:
            text = text.replace(secret, REDACTED)
    return _ECHOED_CREDENTIAL.sub(lambda m: f"{m.group('name')}{m.group('sep')}{REDACTED}", text)


def quote_external(text: str, *, secrets: Iterable[str] = (), limit: int = MAX_QUOTED_CHARS) -> str:
    """Outside text made fit to quote in a one-line message.

    Secrets and URL credentials redacted (before shortening, so no prefix of a secret is
    left), whitespace runs (newlines included) collapsed to one space, the rest escaped by
    :func:`printable`, and the result cut to ``limit`` characters ending in ``...``.
    """
    line = printable(" ".join(redact_urls(redact(text, secrets)).split()))
    return line if len(line) <= limit else f"{line[: limit - 3]}..."
