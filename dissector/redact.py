"""Secrets out of every output unless --show-secrets.

What counts as a secret: the SASL PLAIN password (the user stays), SCRAM
client proofs (p=) and server signatures (v=), OAUTHBEARER bearer tokens (in
SaslAuthenticate AuthBytes and in the raw tokens that follow SaslHandshake v0),
and delegation-token HMACs and token ids (Create/Renew/Expire/Describe).

Decoded bodies get the placeholder b"<redacted>" (or "<redacted>" for strings);
request_raw/response_raw keep their length, the secret bytes become b"*", so
the frame still parses.
"""
from __future__ import annotations

__all__ = ["redact", "redact_token", "PLACEHOLDER"]

PLACEHOLDER = b"<redacted>"
SASL_AUTHENTICATE = 36
CREATE_TOKEN, RENEW_TOKEN, EXPIRE_TOKEN, DESCRIBE_TOKEN = 38, 39, 40, 41


def redact_token(token) -> tuple[bytes, list[tuple[int, int]]]:
    """A SASL token with its secret part replaced, and the (offset, length) spans it had."""
    b = bytes(token)
    spans: list[tuple[int, int]] = []
    if b.count(b"\0") == 2:                      # PLAIN: authzid NUL user NUL password
        start = b.rindex(b"\0") + 1
        spans.append((start, len(b) - start))
    elif b.startswith(b"c=") and b",p=" in b:    # SCRAM client-final: ...,p=<proof>
        start = b.rindex(b",p=") + 3
        end = b.find(b",", start)
        spans.append((start, (len(b) if end < 0 else end) - start))
    elif b.startswith(b"v="):                    # SCRAM server-final: v=<signature>
        end = b.find(b",")
        spans.append((2, (len(b) if end < 0 else end) - 2))
    else:                                        # OAUTHBEARER: n,,\x01auth=Bearer <token>\x01\x01
        at = b.find(b"auth=Bearer ")
        if at < 0:
            at = b.find(b"auth=bearer ")
        if at >= 0:
            start = at + 12
            end = b.find(b"\x01", start)
            spans.append((start, (len(b) if end < 0 else end) - start))
    spans = [s for s in spans if s[1] > 0]
    if not spans:
        return b, spans
    out, prev = [], 0
    for start, n in spans:
        out += [b[prev:start], PLACEHOLDER]
        prev = start + n
    out.append(b[prev:])
    return b"".join(out), spans


def _star(raw: bytes | None, container: bytes, spans) -> bytes | None:
    """Overwrite spans of `container` where it sits inside `raw`."""
    if not raw or not spans:
        return raw
    at = raw.find(container)
    if at < 0:
        return raw
    buf = bytearray(raw)
    for start, n in spans:
        buf[at + start:at + start + n] = b"*" * n
    return bytes(buf)


def _token_field(body: dict | None, key: str, raw: bytes | None) -> bytes | None:
    if not body or body.get(key) is None:
        return raw
    original = bytes(body[key])
    body[key], spans = redact_token(original)
    return _star(raw, original, spans)


def _secret_fields(obj, keys: tuple[str, ...], raw: bytes | None) -> bytes | None:
    if isinstance(obj, list):
        for v in obj:
            raw = _secret_fields(v, keys, raw)
        return raw
    if not isinstance(obj, dict):
        return raw
    for k, v in obj.items():
        if k in keys and v is not None:
            if isinstance(v, str):
                secret = v.encode()
                obj[k] = PLACEHOLDER.decode()
            else:
                secret = bytes(v)
                obj[k] = PLACEHOLDER
            raw = _star(raw, secret, [(0, len(secret))])
        elif isinstance(v, (dict, list)):
            raw = _secret_fields(v, keys, raw)
    return raw


def redact(item):
    """Redact an Exchange in place (anomalies pass through); returns it."""
    if getattr(item, "type", None) != "exchange":
        return item
    key = item.api_key
    if key is None and item.api_name == "SaslToken":
        item.request_raw = _token_field(item.request, "token", item.request_raw)
        item.response_raw = _token_field(item.response, "token", item.response_raw)
    elif key == SASL_AUTHENTICATE:
        item.request_raw = _token_field(item.request, "AuthBytes", item.request_raw)
        item.response_raw = _token_field(item.response, "AuthBytes", item.response_raw)
    elif key in (CREATE_TOKEN, DESCRIBE_TOKEN):
        item.response_raw = _secret_fields(item.response, ("Hmac", "TokenId"), item.response_raw)
    elif key in (RENEW_TOKEN, EXPIRE_TOKEN):
        item.request_raw = _secret_fields(item.request, ("Hmac",), item.request_raw)
    return item
