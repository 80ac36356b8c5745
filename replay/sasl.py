"""Client side of a fresh SASL login (PLAIN, SCRAM-SHA-256/512, RFC 4616 / RFC 5802) for the replay.

Captured tokens are never re-sent: they prove nothing to another broker and are secrets. The replay
logs in again with credentials from the command line; the password is read from an environment
variable and never appears in any output (`Credentials.__repr__` hides it).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from dataclasses import dataclass, field

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class LoginError(Exception):
    pass


@dataclass(frozen=True)
class Credentials:
    mechanism: str
    username: str
    password: str = field(repr=False)

    def __str__(self) -> str:
        return f"{self.mechanism} as {self.username!r}"


def authenticator(creds: Credentials):
    """A generator: send() it each server token (None to start), it yields each client token."""
    if creds.mechanism == "PLAIN":
        return _plain(creds)
    if creds.mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        return _scram(creds, hashlib.sha256 if creds.mechanism.endswith("256") else hashlib.sha512)
    raise LoginError(f"unsupported SASL mechanism {creds.mechanism!r} (use one of {', '.join(MECHANISMS)})")


def _plain(creds: Credentials):
    yield b"\0" + creds.username.encode() + b"\0" + creds.password.encode()


def _scram(creds: Credentials, hash_fn, nonce: str | None = None):
    user = creds.username.replace("=", "=3D").replace(",", "=2C")
    cnonce = nonce or base64.b64encode(os.urandom(24)).decode()
    first_bare = f"n={user},r={cnonce}"
    server_first = yield ("n,," + first_bare).encode()
    if server_first is None:
        raise LoginError("SCRAM: no server-first message")
    attrs = dict(kv.split("=", 1) for kv in bytes(server_first).decode().split(",") if "=" in kv)
    if "e" in attrs:
        raise LoginError(f"SCRAM: server says {attrs['e']}")
    rnonce, salt, iterations = attrs.get("r", ""), base64.b64decode(attrs.get("s", "")), int(attrs.get("i", "0"))
    if not rnonce.startswith(cnonce) or iterations < 1:
        raise LoginError("SCRAM: server-first message does not continue our nonce")
    salted = hashlib.pbkdf2_hmac(hash_fn().name, creds.password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", hash_fn).digest()
    stored_key = hash_fn(client_key).digest()
    final_bare = f"c={base64.b64encode(b'n,,').decode()},r={rnonce}"
    auth_message = f"{first_bare},{bytes(server_first).decode()},{final_bare}".encode()
    signature = hmac.new(stored_key, auth_message, hash_fn).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    server_final = yield f"{final_bare},p={base64.b64encode(proof).decode()}".encode()
    server_key = hmac.new(salted, b"Server Key", hash_fn).digest()
    expected = base64.b64encode(hmac.new(server_key, auth_message, hash_fn).digest()).decode()
    got = dict(kv.split("=", 1) for kv in bytes(server_final or b"").decode().split(",") if "=" in kv)
    if got.get("v") != expected:
        raise LoginError("SCRAM: the server's signature does not match (not the broker we logged in to?)")


def from_args(mechanism: str | None, username: str | None, password_env: str | None) -> Credentials | None:
    """Credentials from the command line, or None without --sasl-mechanism; LoginError says what is missing."""
    if not mechanism:
        if username or password_env:
            raise LoginError("--sasl-username/--sasl-password-env need --sasl-mechanism")
        return None
    mech = mechanism.upper()
    if mech not in MECHANISMS:
        raise LoginError(f"--sasl-mechanism {mechanism}: use one of {', '.join(MECHANISMS)}")
    if not username or not password_env:
        raise LoginError("--sasl-mechanism needs --sasl-username and --sasl-password-env")
    password = os.environ.get(password_env)
    if password is None:
        # not named: what was given may be the password itself, typed where the name goes
        raise LoginError("the environment variable --sasl-password-env names is not set (it holds the SASL password)")
    return Credentials(mech, username, password)
