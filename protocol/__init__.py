"""Sans-I/O Kafka protocol: the versioned schema registry, headers, record data.

Nothing in this package opens a file or a socket: every function takes bytes
(or a memoryview) and returns plain Python objects, or the reverse.
"""

from . import registry
from .codec import (
    Message,
    decode_body,
    decode_request,
    decode_request_header,
    decode_response,
    decode_response_header,
    encode_request,
    encode_response,
    with_size,
)
from .errors import DecodeError, error_name

__all__ = [
    "DecodeError",
    "Message",
    "decode_body",
    "decode_request",
    "decode_request_header",
    "decode_response",
    "decode_response_header",
    "encode_request",
    "encode_response",
    "error_name",
    "registry",
    "with_size",
]
