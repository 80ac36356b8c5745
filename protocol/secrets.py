"""Which parts of Kafka messages are secrets, and how to blank them in a decoded body.

Secrets: the SASL PLAIN password (the user stays), SCRAM client proofs (p=) and
server signatures (v=), the user name of a SCRAM login with a delegation token
(tokenauth=true: it is the token id), OAUTHBEARER bearer tokens (SaslAuthenticate
AuthBytes, and the raw tokens after SaslHandshake v0), delegation-token HMACs and
token ids (Create/Describe answers, Renew/Expire requests), and the salts and salted
passwords of AlterUserScramCredentials.

An Envelope (a broker forwarding a client's request to the controller) carries any of these
inside it: its decoded inner message is redacted as that message would be, and the secret
bytes are starred in its RequestData/ResponseData too.

Knowing them is protocol knowledge, so it lives here (sans-I/O) for every layer
that writes bodies out: the dissector's outputs and replay's reports.
"""

from __future__ import annotations

__all__ = [
    "PLACEHOLDER",
    "SECRET_APIS",
    "SECRET_REQUESTS",
    "redact_token",
    "redact_body",
    "redact_value",
    "star_spans",
]

PLACEHOLDER = b"<redacted>"
SASL_AUTHENTICATE = 36
ENVELOPE = 58
# (api key, direction) -> field names holding a secret wherever they sit in the body
_FIELDS = {
    (38, "response"): frozenset(("Hmac", "TokenId")),  # CreateDelegationToken
    (41, "response"): frozenset(("Hmac", "TokenId")),  # DescribeDelegationToken
    (39, "request"): frozenset(("Hmac",)),  # RenewDelegationToken
    (40, "request"): frozenset(("Hmac",)),  # ExpireDelegationToken
    (51, "request"): frozenset(("Salt", "SaltedPassword")),  # AlterUserScramCredentials
}
_TOKENS = {(SASL_AUTHENTICATE, "request"): "AuthBytes", (SASL_AUTHENTICATE, "response"): "AuthBytes"}
# APIs whose messages may carry a secret: one that does not decode is blanked whole
SECRET_APIS = frozenset([k for k, _ in _FIELDS] + [SASL_AUTHENTICATE, ENVELOPE])
# requests that carry one: once redacted they cannot be re-sent as captured
SECRET_REQUESTS = frozenset([k for k, d in _FIELDS if d == "request"] + [SASL_AUTHENTICATE])
_ALL_FIELDS = frozenset().union(*_FIELDS.values())


def star_spans(raw, found) -> bytes | None:
    """`raw` with b"*" over each (start, length) span of each container, where that container sits
    inside `raw`: found = [(container bytes, [(start, length), ...]), ...]. The search runs over the
    bytes starred so far, so a container that occurs twice (two equal record sets) is found twice."""
    if not raw or not found:
        return raw
    buf = bytearray(raw)
    for container, spans in found:
        at = buf.find(container)
        if at < 0:
            continue
        for start, n in spans:
            buf[at + start : at + start + n] = b"*" * n
    return bytes(buf)


def _value_span(b: bytes, start: int) -> tuple[int, int]:
    end = b.find(b",", start)
    return start, (len(b) if end < 0 else end) - start


def redact_token(token) -> tuple[bytes, list[tuple[int, int]]]:
    """A SASL token with its secret parts replaced, and the (offset, length) spans they had."""
    b = bytes(token)
    spans: list[tuple[int, int]] = []
    if b.count(b"\0") == 2:  # PLAIN: authzid NUL user NUL password
        start = b.rindex(b"\0") + 1
        spans.append((start, len(b) - start))
    elif b.startswith(b"c=") and b",p=" in b:  # SCRAM client-final: ...,p=<proof>
        spans.append(_value_span(b, b.rindex(b",p=") + 3))
    elif b.startswith(b"v="):  # SCRAM server-final: v=<signature>
        spans.append(_value_span(b, 2))
    elif b"tokenauth=true" in b and b",n=" in b:  # SCRAM client-first with a delegation token: n=<token id>
        spans.append(_value_span(b, b.index(b",n=") + 3))
    else:  # OAUTHBEARER: n,,\x01auth=Bearer <token>\x01\x01
        at = b.lower().find(b"auth=bearer ")
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


def _fields(obj, keys: frozenset, found: list) -> None:
    if isinstance(obj, list):
        for v in obj:
            _fields(v, keys, found)
        return
    if not isinstance(obj, dict):
        return
    for k, v in obj.items():
        if k in keys and v is not None:
            if isinstance(v, str):
                secret = v.encode()
                obj[k] = PLACEHOLDER.decode()
            else:
                secret = bytes(v)
                obj[k] = PLACEHOLDER
            found.append((secret, [(0, len(secret))]))
        elif isinstance(v, (dict, list)):
            _fields(v, keys, found)


def redact_body(api_key: int | None, direction: str, body) -> list[tuple[bytes, list[tuple[int, int]]]]:
    """Blank the secrets of one decoded body in place (direction "request" or "response";
    api_key None: a raw SASL token body {"token": bytes}). Returns each secret's container
    as it was with the (offset, length) spans of the secret in it, so a caller can blank
    the same bytes in the raw frame."""
    if not isinstance(body, dict):
        return []
    if api_key == ENVELOPE:
        return _envelope(direction, body)
    if api_key is None:
        key = "token"
    else:
        key = _TOKENS.get((api_key, direction))
    found: list = []
    if key is not None:
        v = body.get(key)
        if v is not None and not isinstance(v, str):
            original = bytes(v)
            body[key], spans = redact_token(original)
            if spans:
                found.append((original, spans))
        return found
    keys = _FIELDS.get((api_key, direction))
    if keys:
        _fields(body, keys, found)
    return found


def _envelope(direction: str, body: dict) -> list:
    """An Envelope's inner message redacted as itself (its `RequestDataDecoded` or
    `ResponseDataDecoded`), and the same bytes starred in the raw field. An inner message that
    did not decode has every byte after its header starred when it may hold a secret."""
    field = "RequestData" if direction == "request" else "ResponseData"
    raw, inner = body.get(field), body.get(field + "Decoded")
    if raw is None or not isinstance(inner, dict):
        return []
    if isinstance(inner.get("body"), dict):
        found = redact_body(inner.get("api_key"), direction, inner["body"])
    else:
        b = bytes(raw)
        # a request's header starts with its API key; a response's says nothing of its API
        if direction == "request" and (len(b) < 2 or int.from_bytes(b[:2], "big", signed=True) not in SECRET_APIS):
            return []
        keep = 8 if direction == "request" else 4
        found = [(b, [(keep, len(b) - keep)])] if len(b) > keep else []
    if found:
        body[field] = star_spans(bytes(raw), found)
    return found


def redact_value(name: str, value):
    """A value found under field `name` of any body (a report's difference, say), secrets
    blanked whatever the API: the token and secret fields above, also inside nested values."""
    if name in _ALL_FIELDS and value is not None and not isinstance(value, (int, float, bool)):
        return PLACEHOLDER.decode() if isinstance(value, str) else PLACEHOLDER
    if name in ("AuthBytes", "token") and isinstance(value, (bytes, bytearray, memoryview)):
        return redact_token(value)[0]
    if isinstance(value, dict):
        return {k: redact_value(k, v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_value(name, v) for v in value]
    return value
