"""What the core's redaction (native/core/src/redact.rs, ExchangeItem::redact) is held to: the
redaction of a Python item, over protocol.secrets. The frozen oracle (tests/oracle) redacts with it.

Secrets out of every output unless --show-secrets.

What counts as a secret is protocol.secrets' business (SASL passwords, SCRAM
proofs and signatures, bearer tokens, delegation-token HMACs and ids, SCRAM
credentials of AlterUserScramCredentials, and each of these inside an Envelope). Here they leave an Exchange:
decoded bodies get the placeholder b"<redacted>" (or "<redacted>" for
strings); request_raw/response_raw keep their length, the secret bytes become
b"*", so the frame still parses. A message of an API that can carry secrets
but did not decode keeps only its header in the raw frame (the rest is
starred): where the secret sits in it is unknown. An orphan response (its
request is not in the capture, so its API is unknown) that decodes whole as a
SaslAuthenticate or Create/DescribeDelegationToken answer with a secret in it
(a capture that began mid-login) is blanked as that answer would be.
"""

from __future__ import annotations

import struct

from protocol.secrets import PLACEHOLDER, SECRET_APIS, redact_body, redact_token, star_spans

# answers that may reach us as orphans with a secret: (api key, versions), newest first
_ORPHAN_GUESSES = ((36, (2, 1, 0)), (38, (3, 2, 1, 0)), (41, (3, 2, 1, 0)))

__all__ = ["redact", "redact_token", "star_after", "star_spans", "PLACEHOLDER"]

_I16 = struct.Struct(">h")


def star_after(raw, start: int):
    """`raw` with every byte from `start` on overwritten by b"*" (same length)."""
    if not raw or len(raw) <= start:
        return raw
    return bytes(raw[:start]) + b"*" * (len(raw) - start)


def _request_header_end(raw) -> int:
    """Where a request header's client id ends (api key, version, correlation id, client id)."""
    if len(raw) < 10:
        return 8
    n = _I16.unpack_from(raw, 8)[0]
    return 10 + n if 0 <= n <= len(raw) - 10 else 10


def _failed(body) -> bool:
    return isinstance(body, dict) and ("_decode_error" in body or "_raw_body" in body)


def redact(item):
    """Redact an Exchange in place (anomalies and connections pass through); returns it."""
    if getattr(item, "type", None) != "exchange":
        return item
    key = item.api_key
    if key is None and item.api_name != "SaslToken":
        _orphan(item)
        return item
    if key is not None and key not in SECRET_APIS:
        return item
    if _failed(item.request):
        if item.request_raw:
            item.request_raw = star_after(item.request_raw, _request_header_end(item.request_raw))
    else:
        item.request_raw = star_spans(item.request_raw, redact_body(key, "request", item.request))
    if _failed(item.response):
        item.response_raw = star_after(item.response_raw, 4)  # keep the correlation id
    else:
        item.response_raw = star_spans(item.response_raw, redact_body(key, "response", item.response))
    return item


def _orphan(item) -> None:
    """Blank an orphan response that reads as an answer carrying a secret."""
    from protocol import DecodeError, decode_response

    raw, body = item.response_raw, item.response
    if not raw or not isinstance(body, dict) or "_raw_body" not in body:
        return
    for key, versions in _ORPHAN_GUESSES:
        for v in versions:
            try:
                msg = decode_response(raw, key, v)
            except DecodeError:
                continue
            except Exception:  # noqa: BLE001 - a guess that fails any other way is no answer either
                continue
            found = redact_body(key, "response", msg.body)
            if found:
                item.response_raw = star_spans(raw, found)
                body["_raw_body"] = star_spans(body["_raw_body"], found)
                return
