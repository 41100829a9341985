"""The output-safety helpers every message and printer of the CLI uses: escapes, URL
credentials, secrets."""

from __future__ import annotations

import pytest

from eks_inference.ops.text import (
    MAX_QUOTED_CHARS,
    printable,
    quote_external,
    redact,
    redact_url,
    redact_urls,
)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("plain text, ünïcode, 漢字", "plain text, ünïcode, 漢字"),
        ("\x1b[2Jcleared", "\\x1b[2Jcleared"),
        ("bell\x07 and CR\r", "bell\\x07 and CR\\r"),
        ("csi\x9b2J", "csi\\x9b2J"),
        ("bidi\u202ereversed\u2066", "bidi\\u202ereversed\\u2066"),
        ("zero\u200bwidth", "zero\\u200bwidth"),
        ("undecodable\udcff byte", "undecodable\\udcff byte"),
        ("two\nlines\ttab", "two\\nlines\\ttab"),
    ],
)
def test_printable_shows_what_a_terminal_would_act_on_escaped(text: str, shown: str) -> None:
    assert printable(text) == shown


def test_printable_keeps_lines_and_tabs_when_asked() -> None:
    assert printable("a\nb\tc\x1b", keep_lines=True) == "a\nb\tc\\x1b"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://user:pass@host:8080/v1", "http://host:8080/v1"),
        ("https://token@host/v1", "https://host/v1"),
        ("http://u:p@ss@host/", "http://host/"),
        ("http://host/p?X-Amz-Signature=abc&flag", "http://host/p?X-Amz-Signature=***&flag"),
        ("http://host/p#access_token=abc", "http://host/p#***"),
        ("s3://bucket/models/a@b/", "s3://bucket/models/a@b/"),
        ("not a url", "not a url"),
    ],
)
def test_redact_url_removes_credentials_and_query_values(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_redact_urls_treats_every_url_in_a_message() -> None:
    message = (
        'Could not connect to the endpoint URL: "http://admin:pw@127.0.0.1:9/bucket?list-type=2"'
        " (retrying 'https://k@other/')"
    )
    assert redact_urls(message) == (
        'Could not connect to the endpoint URL: "http://127.0.0.1:9/bucket?list-type=***"'
        " (retrying 'https://other/')"
    )


def test_redact_replaces_known_secrets_and_echoed_credential_headers() -> None:
    text = (
        "got Authorization: Bearer sk-1234567890; X-Amz-Security-Token=FQoG1234; "
        "{'x-api-key': 'abcdefgh'} and sk-1234567890 again; send Authorization: Bearer <key>"
    )
    assert redact(text, ["sk-1234567890"]) == (
        "got Authorization: ***; X-Amz-Security-Token=***; "
        "{'x-api-key': '***'} and *** again; send Authorization: Bearer <key>"
    )


def test_redact_leaves_values_too_short_to_be_secrets() -> None:
    assert redact("a b c", ["a"]) == "a b c"


def test_quote_external_is_one_bounded_printable_line() -> None:
    quoted = quote_external("line one\nline two\x1b[31m " + "x" * 500)
    assert quoted.startswith("line one line two\\x1b[31m xxx")
    assert quoted.endswith("...")
    assert len(quoted) == MAX_QUOTED_CHARS


def test_quote_external_redacts_before_it_shortens() -> None:
    """A secret straddling the cut would otherwise leave its first characters behind."""
    secret = "s" * 40
    quoted = quote_external("x" * (MAX_QUOTED_CHARS - 10) + secret, secrets=[secret])
    assert quoted == "x" * (MAX_QUOTED_CHARS - 10) + "***"
