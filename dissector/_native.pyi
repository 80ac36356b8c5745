# The native core's interface (native/, Rust; built as dissector._native). Checked against the built
# module (names, parameters, keyword-only-ness, defaults) by mypy's stubtest:
#   python -m mypy.stubtest dissector._native --mypy-config-file .ci/mypy-stubtest.ini
# (.ci/run; tests/test_native_boundary.py runs it too when mypy is installed).
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import IO, Any, final

__all__ = [
    "Limits",
    "Protocol",
    "Items",
    "EngineConfig",
    "ANOMALY_TABLE",
    "read_packets_tuples",
    "ip6_text_of",
    "first_ts",
    "tcp_events",
    "tcp_events_packets",
    "FrameSplitter",
    "Names",
    "Registry",
    "Engine",
    "ExchangesTest",
    "ArrowColumn",
    "Taken",
    "Pending",
    "RowsState",
    "_clock",
    "_json_f64",
    "_json_str",
    "decompress",
    "decompress_many",
    "_xxh32",
    "_summary_v2",
    "record_facts",
    "records_json",
    "records_of",
    "record_columns",
    "record_columns_many",
    "_records_bench",
    "V2_HEADER",
    "check_columns",
    "nested_payloads",
    "internal_schemas",
    "internal_row",
    "internal_topics",
    "metadata_topic_names",
    "RangeScan",
    "split_ranges",
    "count_frames",
    "bucket_of",
    "_fnmatchcase",
    "_json_bytes",
    "_not_printable",
    "KeyLog",
    "leading_secrets",
]

# dissector.anomalies.AnomalyKind's values, as native/core/src/anomalies.rs lists them
ANOMALY_TABLE: tuple[tuple[str, str, str, str, str], ...]

# -- the engine's configuration (native/py/src/config.rs), built by keyword --------------------------

@final
class Limits:
    """The budgets and sizes of the layers: frames, TCP reassembly, the release order, decompression."""

    def __new__(
        cls,
        *,
        max_frame_size: int,
        max_buffer_per_direction: int,
        lost_after: int,
        max_buffer_total: int,
        window: float,
        max_items: int,
        max_bytes: int,
        max_decompressed: int,
    ) -> Limits: ...
    @property
    def max_frame_size(self) -> int: ...
    @property
    def max_buffer_per_direction(self) -> int: ...
    @property
    def lost_after(self) -> int: ...
    @property
    def max_buffer_total(self) -> int: ...
    @property
    def window(self) -> float: ...
    @property
    def max_items(self) -> int: ...
    @property
    def max_bytes(self) -> int: ...
    @property
    def max_decompressed(self) -> int: ...

@final
class Protocol:
    """The protocol facts Python holds, checked against the core's (which decodes with its own copy of
    the registry, generated from the same specs); raises ValueError when the API names, the secret
    APIs or the record APIs differ."""

    def __new__(
        cls,
        *,
        api_names: Mapping[int, str],
        secret_apis: Sequence[int],
        record_apis: Sequence[int],
    ) -> Protocol: ...
    @property
    def api_names(self) -> dict[int, str]: ...
    @property
    def secret_apis(self) -> list[int]: ...
    @property
    def record_apis(self) -> list[int]: ...

@final
class Items:
    """The item classes and their field names (in their constructors' order), the anomaly kinds and
    the file faults; raises ValueError when the fields or kinds are not the native core's."""

    def __new__(
        cls,
        *,
        exchange: type,
        exchange_fields: Sequence[str],
        anomaly: type,
        anomaly_fields: Sequence[str],
        connection: type,
        connection_fields: Sequence[str],
        anomaly_table: Sequence[Sequence[str]],
        file_faults: Sequence[str],
    ) -> Items: ...
    @property
    def exchange(self) -> type: ...
    @property
    def anomaly(self) -> type: ...
    @property
    def connection(self) -> type: ...
    @property
    def anomaly_table(self) -> list[list[str]]: ...
    @property
    def file_faults(self) -> list[str]: ...

@final
class EngineConfig:
    """Everything an Engine is made with but what it reads and its run's mode; raises ValueError when
    `columns` are not the columns the native core writes."""

    def __new__(
        cls,
        *,
        ports: Sequence[int],
        connections: bool,
        limits: Limits,
        protocol: Protocol,
        items: Items,
        opener: Callable[[str], Any],
        file_errors: tuple[type[BaseException], ...],
        columns: Mapping[str, Sequence[str]] | None = None,
        tls_keylogs: Sequence[KeyLog | bytes] = ...,
    ) -> EngineConfig: ...
    @property
    def ports(self) -> list[int]: ...
    @property
    def connections(self) -> bool: ...
    @property
    def limits(self) -> Limits: ...
    @property
    def protocol(self) -> Protocol: ...
    @property
    def items(self) -> Items: ...
    @property
    def opener(self) -> Callable[[str], Any]: ...
    @property
    def file_errors(self) -> tuple[type[BaseException], ...]: ...
    @property
    def columns(self) -> dict[str, list[str]] | None: ...
    @property
    def tls_keylogs(self) -> list[KeyLog]: ...

# -- the engine (native/py/src/engine.rs) ------------------------------------------------------------

@final
class Names:
    """TopicId (uuid.UUID) -> topic name, in insertion order."""

    def __new__(cls) -> Names: ...
    def __setitem__(self, key: Any, value: str, /) -> None: ...
    def __getitem__(self, key: Any, /) -> str: ...
    def get(self, key: Any, default: Any = None) -> Any: ...
    def __contains__(self, key: object, /) -> bool: ...
    def __len__(self) -> int: ...
    def items(self) -> list[tuple[Any, str]]: ...
    def to_dict(self) -> dict[Any, str]: ...

@final
class Engine:
    """dissect()'s loop over the native layers: next_batch() gives the items (or lines, with render;
    or only what Python must write, on a land run with rows) until it gives None."""

    def __new__(
        cls,
        *,
        config: EngineConfig,
        files: Sequence[bytes] = ...,
        packets: Iterable[tuple[Any, ...]] | None = None,
        end: tuple[float, float | None] | Callable[[], tuple[float, float | None]] | None = None,
        progress: Callable[[int], object] | None = None,
        render: str | None = None,
        stitch: bool = False,
        rows: bool = False,
        threads: int = 1,
    ) -> Engine: ...
    def next_batch(self) -> list[Any] | None: ...
    def set_render_options(self, records: bool, raw: bool, no_payloads: bool, filter: Any | None = None) -> None: ...
    def set_land_filter(self, filter: Any) -> None: ...
    def tls_stats(self) -> dict[str, int]: ...
    def set_live(self, arrival: bool = False) -> None: ...
    def set_watched(self, on: bool) -> None: ...
    def set_topics(self, on: bool) -> None: ...
    def in_flight(self, limit: int = ...) -> list[tuple[str, str | None, str, float]]: ...
    def rows_pending(self) -> Pending | None: ...
    def set_row_options(self, records: bool, payloads: bool) -> None: ...
    def set_redact(self, on: bool) -> None: ...
    def rows_take(self, table: str) -> Taken: ...
    def rows_state(self) -> RowsState | None: ...
    def set_carry(self) -> None: ...
    def carried(self) -> bytes | None: ...
    def restore(self, state: bytes) -> None: ...
    @property
    def latest(self) -> float | None: ...

@final
class ArrowColumn:
    """A column of rows, for pyarrow to import once through the Arrow C data interface
    (`pa.array(column, type=...)`)."""

    def __arrow_c_array__(self, requested_schema: Any = None) -> tuple[Any, Any]: ...

@final
class Taken:
    """A table's buffered rows, taken: each column and the date column (ArrowColumn), the
    distinct dates, whether a row names a topic only by id."""

    @property
    def columns(self) -> list[ArrowColumn]: ...
    @property
    def date(self) -> ArrowColumn: ...
    @property
    def dates(self) -> list[str | None]: ...
    @property
    def marked(self) -> bool: ...

@final
class Pending:
    """Rows pending per table (in the native tables' order) and the bytes held in them."""

    @property
    def rows(self) -> list[int]: ...
    @property
    def held(self) -> int: ...

@final
class RowsState:
    """Rows written per table, the topic-id -> name map and the placeholders the rows hold."""

    @property
    def counts(self) -> list[int]: ...
    @property
    def names(self) -> Names: ...
    @property
    def unresolved(self) -> set[Any]: ...

@final
class ExchangesTest:
    """Test-only: the native exchanges layer fed tcp events as tuples."""

    def __new__(cls, config: EngineConfig) -> ExchangesTest: ...
    def feed(self, ev: tuple[Any, ...]) -> list[Any]: ...
    def finish(self, ts: float | None) -> list[Any]: ...
    def oldest_open(self) -> float | None: ...

# -- the layers, for the tests and benchmarks ------------------------------------------------------

@final
class FrameSplitter:
    def __new__(
        cls,
        plausible: Callable[..., Any] | None = None,
        *,
        max_frame_size: int = ...,
        min_frame_size: int = 0,
        hunting: bool = False,
        plausible_first: Callable[..., Any] | None = None,
    ) -> FrameSplitter: ...
    def feed(self, data: bytes, ts: float) -> list[Any]: ...
    def gap(self, size: int, ts: float) -> list[Any]: ...
    def drop(self, ts: float, why: str) -> list[Any]: ...
    def finish(self, ts: float) -> list[Any]: ...
    @property
    def dropped(self) -> int: ...
    @property
    def buffered(self) -> int: ...
    @property
    def hunting(self) -> bool: ...
    @property
    def partial_ts(self) -> float | None: ...

@final
class Registry:
    """The core's registry (its embedded copy of protocol.registry's schema data) and its decoders;
    nested=False decodes no payload inside bytes fields."""

    def __new__(cls, *, nested: bool = True) -> Registry: ...
    def general(
        self, frame: bytes, api_key: int | None = None, api_version: int = 0, lenient: bool = True
    ) -> tuple[Any, ...]: ...
    def decode_request(self, frame: bytes) -> Any: ...
    def decode_response(self, frame: bytes, api_key: int, api_version: int) -> Any: ...
    def walk_request(self, frame: bytes, names: Names, generic: bool = False) -> Any: ...
    def walk_response(
        self, frame: bytes, api_key: int, api_version: int, names: Names, generic: bool = False
    ) -> Any: ...
    def request_header_version(self, api_key: int, api_version: int) -> int: ...
    def response_header_version(self, api_key: int, api_version: int) -> int: ...
    def field_int(self, frame: bytes, dir: str, api_key: int, api_version: int, name: str) -> int | None: ...
    def time(self, frame: bytes, dir: str, api_key: int, api_version: int, n: int, objects: bool = True) -> float: ...

def read_packets_tuples(
    files: Sequence[str], opener: Callable[[str], IO[bytes]], file_errors: tuple[type[BaseException], ...]
) -> list[tuple[Any, ...]]: ...
def ip6_text_of(b: bytes) -> str: ...
def first_ts(
    path: bytes, opener: Callable[[str], IO[bytes]], file_errors: tuple[type[BaseException], ...]
) -> float | None: ...
def tcp_events(
    files: Sequence[str],
    opener: Callable[[str], IO[bytes]],
    file_errors: tuple[type[BaseException], ...],
    max_buffer_per_direction: int,
    lost_after: int,
    max_buffer_total: int,
    held_every: bool = False,
) -> list[tuple[Any, ...]]: ...
def tcp_events_packets(
    packets: Iterable[tuple[Any, ...]],
    max_buffer_per_direction: int,
    lost_after: int,
    max_buffer_total: int,
    held_every: bool = False,
) -> list[tuple[Any, ...]]: ...

# -- records and compression (native/py/src/records.rs, compression.rs) -------------------------------

# the magic 2 batch header as records.rs reads it: (field, struct format code, offset)
V2_HEADER: tuple[tuple[str, str, int], ...]

def decompress(codec: int, data: bytes, max_size: int = ..., legacy_lz4: bool = False) -> tuple[str, Any]: ...
def decompress_many(items: Sequence[tuple[int, bytes, int, bool]]) -> list[tuple[str, Any]]: ...
def record_facts(data: bytes, allow_partial: bool = True, max_decompressed: int = ...) -> tuple[Any, ...]: ...
def records_json(
    data: bytes, no_payloads: bool = False, topic: str | None = None, max_decompressed: int = ...
) -> bytes: ...
def records_of(
    data: bytes, allow_partial: bool = True, max_decompressed: int = ...
) -> list[list[tuple[int, int | None, bytes | None, bytes | None, list[tuple[str | None, bytes | None]]]]]: ...
def record_columns(fields: Sequence[bytes], max_decompressed: int = ...) -> tuple[Any, ...]: ...
def record_columns_many(exchanges: Sequence[Sequence[bytes]], max_decompressed: int = ...) -> list[tuple[Any, ...]]: ...
def _records_bench(fields: Sequence[bytes], repeat: int, max_decompressed: int = ...) -> float: ...
def _summary_v2(data: bytes) -> bytes | None: ...
def _xxh32(data: bytes) -> int: ...

# -- output details, for the tests (native/py/src/json.rs, render.rs) --------------------------------

def _json_f64(v: float) -> bytes: ...
def _json_str(s: str) -> bytes: ...
def _clock(ts: float | None) -> str: ...

# test-only entry points of the native writer's parts
def _fnmatchcase(name: str, pat: str) -> bool: ...
def _json_bytes(b: bytes) -> bytes: ...
def _not_printable() -> tuple[str, list[tuple[int, int]]]: ...

# byte ranges of a capture file (native/py/src/ranges.rs): the Spark engine's stage 1
def split_ranges(path: str, target_bytes: int) -> list[tuple[int | None, int | None, int | None, bytes]]: ...
def count_frames(
    path: str,
    start: int | None,
    end: int | None,
    preamble: bytes,
    order: int,
    opener: Callable[[str], IO[bytes]],
    file_errors: tuple[type[BaseException], ...],
) -> int: ...
def bucket_of(src: str, sport: int, dst: str, dport: int, n: int) -> int: ...

@final
class RangeScan:
    """One range's rows, bucketed per connection: (bucket, chunk number, rows) as chunks fill."""

    def __new__(
        cls,
        *,
        path: str,
        start: int | None,
        end: int | None,
        preamble: bytes,
        order: int,
        index: int,
        buckets: int,
        opener: Callable[[str], IO[bytes]],
        file_errors: tuple[type[BaseException], ...],
        keep: int | None = None,
        chunk_rows: int = 4096,
        chunk_bytes: int = ...,
        refs: bool = False,
    ) -> RangeScan: ...
    def __iter__(self) -> RangeScan: ...
    def __next__(self) -> tuple[int, int, list[tuple[Any, ...]]]: ...
    @property
    def ends(self) -> tuple[float | None, float | None]: ...
    @property
    def frames(self) -> int: ...

def check_columns(columns: dict[str, list[str]]) -> None: ...
def nested_payloads() -> list[tuple[str, str, str, str]]: ...
def internal_schemas() -> list[tuple[str, int, str | None, str]]: ...
def internal_row(
    topic: str | None, key: bytes | None, value: bytes | None, control: bool = False
) -> tuple[str | None, str | None, bool]: ...
def metadata_topic_names(field: bytes) -> list[tuple[bytes, str]]: ...
def internal_topics() -> list[str]: ...

# -- TLS (native/py/src/tls.rs) ----------------------------------------------------------------------

@final
class KeyLog:
    """An NSS key log's text parsed by the core, once: dissector.tls checks a file by what it took,
    and an engine made with it takes the parsed secrets as they are. Pickled, it is its text."""

    def __new__(cls, text: bytes) -> KeyLog: ...
    def __bytes__(self) -> bytes: ...
    def __reduce__(self) -> tuple[type[bytes], tuple[bytes]]: ...
    @property
    def taken(self) -> int: ...
    @property
    def not_understood(self) -> int: ...

# the key log text of a pcapng's Decryption Secrets Blocks before its first packet (b"" when none)
def leading_secrets(
    path: bytes, opener: Callable[[str], Any], file_errors: tuple[type[BaseException], ...]
) -> bytes: ...
