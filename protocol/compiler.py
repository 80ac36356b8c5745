"""Compile one versioned schema into a specialised decoder and encoder.

Arrays of fixed-width numbers decode to the tuples struct returns (copying
each into a list cost a third of a Metadata decode); other arrays are lists.

The registry is data (protocol/_generated/registry_data.py). Interpreting that
tree field by field for every frame would be slow, so for each (schema,
version) we write straight-line Python source once - fixed-width runs merged
into one struct.unpack_from, nested structs inlined into their loops, no
per-field dispatch - and compile it. A map from source line to field path lets
a failure name the field and byte offset without slowing the happy path.
"""

from __future__ import annotations

import struct
import uuid

_FIXED = {
    "int8": ("b", 1, 0),
    "int16": ("h", 2, 0),
    "uint16": ("H", 2, 0),
    "int32": ("i", 4, 0),
    "uint32": ("I", 4, 0),
    "int64": ("q", 8, 0),
    "float64": ("d", 8, 0.0),
    "bool": ("?", 1, False),
    "uuid": ("16s", 16, None),
}
ZERO_UUID = uuid.UUID(int=0)
_NULL_COMPACT, _NULL_INT16, _NULL_INT32 = b"\x00", b"\xff\xff", b"\xff\xff\xff\xff"


class _Bad(Exception):
    """Raised inside generated code; turned into DecodeError with field path and offset."""


def _in(rng, v: int) -> bool:
    return rng is not None and rng[0] <= v <= rng[1]


def read_uvarint(buf, pos: int):
    # Unrolled: lengths of record data are 2-3 byte varints on every Produce/Fetch partition.
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    r = b & 0x7F
    b = buf[pos + 1]
    if b < 0x80:
        return r | (b << 7), pos + 2
    r |= (b & 0x7F) << 7
    b = buf[pos + 2]
    if b < 0x80:
        return r | (b << 14), pos + 3
    r |= (b & 0x7F) << 14
    b = buf[pos + 3]
    if b < 0x80:
        return r | (b << 21), pos + 4
    r |= (b & 0x7F) << 21
    b = buf[pos + 4]
    if b < 0x80:
        return r | (b << 28), pos + 5
    raise _Bad("unsigned varint longer than 5 bytes")


def write_uvarint(w: bytearray, n: int) -> None:
    while n >= 0x80:
        w.append((n & 0x7F) | 0x80)
        n >>= 7
    w.append(n)


def _uuid_bytes(v) -> bytes:
    if v is None:
        return bytes(16)
    if isinstance(v, uuid.UUID):
        return v.bytes
    if isinstance(v, str):
        return uuid.UUID(v).bytes
    return bytes(v)


def _utf8(v) -> bytes:
    return v.encode("utf-8") if isinstance(v, str) else bytes(v)


_SAFE_UNKNOWN = uuid.SafeUUID.unknown
_UUIDS: dict[bytes, uuid.UUID] = {}
_UUID_CACHE_MAX = 1 << 16


def _make_uuid(raw) -> uuid.UUID:
    # Topic ids repeat in every Metadata/Fetch, and UUIDs are immutable: reuse them.
    raw = bytes(raw)
    u = _UUIDS.get(raw)
    if u is None:
        if len(_UUIDS) >= _UUID_CACHE_MAX:
            _UUIDS.clear()
        # Skips UUID.__init__'s argument parsing.
        u = object.__new__(uuid.UUID)
        object.__setattr__(u, "int", int.from_bytes(raw, "big"))
        object.__setattr__(u, "is_safe", _SAFE_UNKNOWN)
        _UUIDS[raw] = u
    return u


_SMALL_ARRAY = 64


def _array_unpackers(code: str) -> tuple:
    return tuple(struct.Struct(f">{n}{code}").unpack_from for n in range(_SMALL_ARRAY))


_RUNTIME = {
    "_Bad": _Bad,
    "_uv": read_uvarint,
    "_wuv": write_uvarint,
    "_uuid": _make_uuid,
    "_uuidb": _uuid_bytes,
    "_utf8": _utf8,
    "_unpack": struct.unpack_from,
    "_pack": struct.pack,
    "_ZERO_UUID": ZERO_UUID,
}


def default_value(field: dict):
    """Kafka's default for a field absent from a version (or missing from a dict being encoded)."""
    if "default" in field:
        return field["default"]
    if field.get("array"):
        return []
    t = field["type"]
    if t == "struct":
        return {}
    if t in _FIXED:
        return ZERO_UUID if t == "uuid" else _FIXED[t][2]
    return {"string": "", "bytes": b"", "records": None}[t]


def min_size(fields: list[dict], version: int, flexible: bool) -> int:
    """Fewest bytes one struct can take: bounds array counts before anything is allocated."""
    total = 1 if flexible else 0
    for f in fields:
        if not _in(f["versions"], version) or (flexible and _in(f.get("tagged"), version)):
            continue
        if f.get("array") or f["type"] in ("string", "bytes", "records"):
            total += 1 if flexible else (2 if f["type"] == "string" and not f.get("array") else 4)
        elif f["type"] == "struct":
            total += 1 if _in(f.get("nullable"), version) else min_size(f["fields"], version, flexible)
        else:
            total += _FIXED[f["type"]][1]
    return total


class _Source:
    def __init__(self, name: str):
        self.name = name
        self.lines: list[str] = []
        self.paths: list[str] = []  # field path per line, for error messages
        self.consts: dict[str, object] = {}
        self.counter = 0
        self.indent = 1

    def emit(self, line: str, path: str = "") -> None:
        self.lines.append("    " * self.indent + line)
        self.paths.append(path)

    def var(self, stem: str) -> str:
        self.counter += 1
        return f"{stem}{self.counter}"

    def struct(self, fmt: str) -> str:
        name = "_S_" + fmt.replace("?", "B_").replace("16s", "U")
        self.consts.setdefault(name, struct.Struct(">" + fmt))
        return name

    def unpacker(self, fmt: str) -> str:
        """A bound unpack_from, passed in as a default argument so the hot loop reads a local."""
        name = "_u_" + self.struct(fmt)[3:]
        self.consts.setdefault(name, self.consts[self.struct(fmt)].unpack_from)
        return name


class _Decoder:
    """Writes the decode function body for one (schema, version)."""

    def __init__(self, src: _Source, version: int, flexible: bool):
        self.s = src
        self.v = version
        self.flex = flexible

    # -- lengths -----------------------------------------------------------------
    def length(self, var: str, compact: bool, wide: bool, path: str) -> None:
        """Reads a length into var; -1 means null. wide: int32 (arrays, bytes) else int16."""
        e = self.s.emit
        if compact:
            # Lengths are uvarint(n + 1); one byte covers n < 127, the common case.
            e(f"{var} = buf[pos] - 1", path)
            e(f"if {var} < 127: pos += 1", path)
            e(f"else: {var}, pos = _uv(buf, pos); {var} -= 1", path)
        else:
            e(f"{var}, = {self.s.unpacker('i' if wide else 'h')}(buf, pos)", path)
            e(f"pos += {4 if wide else 2}", path)

    def blob(self, target: str, kind: str, compact: bool, path: str) -> None:
        """string / bytes / records: a length then that many bytes; never read past the end."""
        e = self.s.emit
        n = self.s.var("n")
        if compact:
            # Short non-null values (one length byte, inside the frame) in one test.
            e(f"{n} = buf[pos]", path)
            e(f"if 0 < {n} < 128 and pos + {n} <= end:", path)
            if kind == "string":
                e(f"    {target} = str(buf[pos + 1:pos + {n}], 'utf-8'); pos += {n}", path)
            else:
                e(f"    {target} = mv[pos + 1:pos + {n}]; pos += {n}", path)
            e("else:", path)
            self.s.indent += 1
            self._blob_slow(target, kind, compact, path)
            self.s.indent -= 1
            return
        self._blob_slow(target, kind, compact, path)

    def _blob_slow(self, target: str, kind: str, compact: bool, path: str) -> None:
        e = self.s.emit
        n = self.s.var("n")
        self.length(n, compact, kind != "string", path)
        e(f"if {n} < 0: {target} = None", path)
        e("else:", path)
        self.s.indent += 1
        e(
            f"if {n} > end - pos: raise _Bad('{kind} length %d runs past the end (%d bytes left)' % ({n}, end - pos))",
            path,
        )
        if kind == "string":
            e(f"{target} = str(buf[pos:pos + {n}], 'utf-8')", path)
        else:
            e(f"{target} = mv[pos:pos + {n}]", path)
        e(f"pos += {n}", path)
        self.s.indent -= 1

    # -- fields -----------------------------------------------------------------
    def struct_body(self, fields: list[dict], target: str, path: str) -> None:
        """Decode one struct's fields into a new dict bound to `target`."""
        v = self.v
        present = [f for f in fields if _in(f["versions"], v)]
        regular = [f for f in present if not (self.flex and _in(f.get("tagged"), v))]
        tagged = [f for f in present if self.flex and _in(f.get("tagged"), v)]
        names: list[tuple[str, str]] = []
        run: list[tuple[dict, str]] = []

        def flush_run():
            if not run:
                return
            fmt = "".join(_FIXED[f["type"]][0] for f, _ in run)
            size = sum(_FIXED[f["type"]][1] for f, _ in run)
            p = path + ".".join(f["name"] for f, _ in run)
            lhs = ", ".join(var for _, var in run)
            self.s.emit(f"{lhs}{',' if len(run) == 1 else ''} = {self.s.unpacker(fmt)}(buf, pos)", p)
            self.s.emit(f"pos += {size}", p)
            for f, var in run:
                if f["type"] == "uuid":
                    self.s.emit(f"{var} = _uuid({var})", p)
            run.clear()

        for f in regular:
            var = self.s.var("v")
            names.append((f["name"], var))
            if f["type"] in _FIXED and not f.get("array"):
                run.append((f, var))
                continue
            flush_run()
            self.field(f, var, path + f["name"])
        flush_run()
        items = ", ".join(f"{name!r}: {var}" for name, var in names)
        self.s.emit(f"{target} = {{{items}}}", path.rstrip("."))
        if self.flex:
            self.tag_section(tagged, target, path)

    def field(self, f: dict, target: str, path: str) -> None:
        v = self.v
        compact = self.flex
        if "flexible" in f:
            compact = self.flex and _in(f["flexible"], v)
        e = self.s.emit
        if f.get("array"):
            n = self.s.var("n")
            t = f["type"]
            if t in _FIXED and t != "uuid" and self.flex:
                code, size, _ = _FIXED[t]
                arrays, skips = f"_carr_{code}", f"_cskip_{code}"
                self.s.consts.setdefault(arrays, (None,) + _array_unpackers(code))
                self.s.consts.setdefault(skips, tuple(1 + size * (k - 1) for k in range(_SMALL_ARRAY + 1)))
                # The raw length byte k means k - 1 elements: one lookup reads them all.
                p0 = self.s.var("k")
                e(f"{p0} = buf[pos]", path)
                e(f"if 0 < {p0} <= {_SMALL_ARRAY}: {target} = {arrays}[{p0}](buf, pos + 1); pos += {skips}[{p0}]", path)
                e("else:", path)
                self.s.indent += 1
                self.length(n, self.flex, True, path)
                e(f"if {n} < 0: {target} = None", path)
                e("else:", path)
                e(
                    f"    if {n} * {size} > end - pos: raise _Bad('array of %d {t} runs past the end (%d bytes left)' % ({n}, end - pos))",
                    path,
                )
                e(f"    {target} = _unpack('>%d{code}' % {n}, buf, pos); pos += {n} * {size}", path)
                self.s.indent -= 1
                return
            self.length(n, self.flex, True, path)
            e(f"if {n} < 0: {target} = None", path)
            if t in _FIXED and t != "uuid":
                code, size, _ = _FIXED[t]
                arrays = f"_arr_{code}"
                self.s.consts.setdefault(arrays, _array_unpackers(code))
                # Small counts: a cached Struct, which itself refuses a short buffer.
                e(f"elif {n} < {_SMALL_ARRAY}:", path)
                e(f"    {target} = {arrays}[{n}](buf, pos); pos += {n} * {size}", path)
                e("else:", path)
                e(
                    f"    if {n} * {size} > end - pos: raise _Bad('array of %d {t} runs past the end (%d bytes left)' % ({n}, end - pos))",
                    path,
                )
                e(f"    {target} = _unpack('>%d{code}' % {n}, buf, pos); pos += {n} * {size}", path)
                return
            e("else:", path)
            self.s.indent += 1
            if t == "uuid":
                e(
                    f"if {n} * 16 > end - pos: raise _Bad('array of %d uuid runs past the end (%d bytes left)' % ({n}, end - pos))",
                    path,
                )
                e(f"{target} = [_uuid(buf[pos + 16 * i:pos + 16 * i + 16]) for i in range({n})]", path)
                e(f"pos += {n} * 16", path)
            else:
                least = (
                    min_size(f["fields"], v, self.flex)
                    if t == "struct"
                    else (1 if self.flex else (2 if t == "string" else 4))
                )
                e(
                    f"if {n} * {least} > end - pos: raise _Bad('array of %d elements runs past the end (%d bytes left)' % ({n}, end - pos))",
                    path,
                )
                e(f"{target} = []", path)
                app = self.s.var("app")
                e(f"{app} = {target}.append", path)
                e(f"for _ in range({n}):", path)
                self.s.indent += 1
                item = self.s.var("it")
                if t == "struct":
                    self.struct_body(f["fields"], item, path + "[].")
                else:
                    self.blob(item, t, self.flex, path + "[]")
                e(f"{app}({item})", path)
                self.s.indent -= 1
            self.s.indent -= 1
        elif f["type"] == "struct":
            if _in(f.get("nullable"), v):
                e("if buf[pos] >= 128:", path)
                e(f"    pos += 1; {target} = None", path)
                e("else:", path)
                self.s.indent += 1
                e("pos += 1", path)
                self.struct_body(f["fields"], target, path + ".")
                self.s.indent -= 1
            else:
                self.struct_body(f["fields"], target, path + ".")
        elif f["type"] in _FIXED:
            code, size, _ = _FIXED[f["type"]]
            e(f"{target}, = {self.s.unpacker(code)}(buf, pos)", path)
            e(f"pos += {size}", path)
            if f["type"] == "uuid":
                e(f"{target} = _uuid({target})", path)
        else:
            self.blob(target, f["type"], compact, path)

    def tag_section(self, tagged: list[dict], target: str, path: str) -> None:
        e = self.s.emit
        p = path + "<tagged fields>"
        n, tag, size, te = (self.s.var(x) for x in ("nt", "tag", "ts", "te"))
        # Almost every struct has no tagged fields: one byte, one test.
        e("if not buf[pos]: pos += 1", p)
        e("else:", p)
        self.s.indent += 1
        e(f"{n}, pos = _uv(buf, pos)", p)
        e(f"if {n} * 2 > end - pos: raise _Bad('%d tagged fields run past the end' % {n})", p)
        e(f"for _ in range({n}):", p)
        self.s.indent += 1
        e(f"{tag}, pos = _uv(buf, pos)", p)
        e(f"{size}, pos = _uv(buf, pos)", p)
        e(f"{te} = pos + {size}", p)
        e(f"if {te} > end: raise _Bad('tagged field %d of %d bytes runs past the end' % ({tag}, {size}))", p)
        kw = "if"
        for f in sorted(tagged, key=lambda f: f["tag"]):
            e(f"{kw} {tag} == {f['tag']}:", p)
            self.s.indent += 1
            val = self.s.var("tv")
            self.field(f, val, path + f["name"])
            e(
                f"if pos != {te}: raise _Bad('tagged field {f['name']} is %d bytes, decoded %d' % ({size}, pos - {te} + {size}))",
                p,
            )
            e(f"{target}[{f['name']!r}] = {val}", p)
            self.s.indent -= 1
            kw = "elif"
        e("else:" if tagged else "if True:", p)
        self.s.indent += 1
        e(f"{target}.setdefault('_unknown_tagged_fields', {{}})[{tag}] = bytes(buf[pos:{te}])", p)
        e(f"pos = {te}", p)
        self.s.indent -= 2
        self.s.indent -= 1


class _Encoder:
    """Writes the encode function body for one (schema, version)."""

    def __init__(self, src: _Source, version: int, flexible: bool):
        self.s = src
        self.v = version
        self.flex = flexible

    def length(self, w: str, expr: str, compact: bool, wide: bool) -> None:
        if compact:
            self.s.emit(f"_wuv({w}, {expr} + 1)")
        else:
            self.s.emit(f"{w} += {self.s.struct('i' if wide else 'h')}.pack({expr})")

    def blob(self, w: str, val: str, kind: str, compact: bool) -> None:
        e = self.s.emit
        null = _NULL_COMPACT if compact else (_NULL_INT16 if kind == "string" else _NULL_INT32)
        e(f"if {val} is None:")
        e(f"    {w} += {null!r}")
        e("else:")
        self.s.indent += 1
        if kind == "string":
            e(f"{val} = _utf8({val})")
        self.length(w, f"len({val})", compact, kind != "string")
        e(f"{w} += {val}")
        self.s.indent -= 1

    def struct_body(self, fields: list[dict], d: str, w: str) -> None:
        v = self.v
        present = [f for f in fields if _in(f["versions"], v)]
        regular = [f for f in present if not (self.flex and _in(f.get("tagged"), v))]
        tagged = [f for f in present if self.flex and _in(f.get("tagged"), v)]
        run: list[dict] = []

        def flush_run():
            if not run:
                return
            fmt = "".join(_FIXED[f["type"]][0] for f in run)
            args = []
            for f in run:
                got = f"{d}.get({f['name']!r}, {self.const(default_value(f))})"
                args.append(f"_uuidb({got})" if f["type"] == "uuid" else got)
            self.s.emit(f"{w} += {self.s.struct(fmt)}.pack({', '.join(args)})")
            run.clear()

        for f in regular:
            if f["type"] in _FIXED and not f.get("array"):
                run.append(f)
                continue
            flush_run()
            val = self.s.var("x")
            self.s.emit(f"{val} = {d}.get({f['name']!r}, {self.const(default_value(f))})")
            self.field(f, val, w)
        flush_run()
        if self.flex:
            self.tag_section(tagged, d, w)

    def const(self, value) -> str:
        if value is None or isinstance(value, (bool, int, float, str, bytes)):
            return repr(value)
        if value == []:
            return "()"
        if value == {}:
            return "{}"
        if isinstance(value, uuid.UUID):
            return "_ZERO_UUID"
        raise TypeError(value)

    def field(self, f: dict, val: str, w: str) -> None:
        v = self.v
        compact = self.flex
        if "flexible" in f:
            compact = self.flex and _in(f["flexible"], v)
        e = self.s.emit
        t = f["type"]
        if f.get("array"):
            e(f"if {val} is None:")
            e(f"    {w} += {(_NULL_COMPACT if self.flex else _NULL_INT32)!r}")
            e("else:")
            self.s.indent += 1
            self.length(w, f"len({val})", self.flex, True)
            if t in _FIXED and t != "uuid":
                e(f"{w} += _pack('>%d{_FIXED[t][0]}' % len({val}), *{val})")
            else:
                item = self.s.var("el")
                e(f"for {item} in {val}:")
                self.s.indent += 1
                if t == "struct":
                    self.struct_body(f["fields"], item, w)
                elif t == "uuid":
                    e(f"{w} += _uuidb({item})")
                else:
                    self.blob(w, item, t, self.flex)
                self.s.indent -= 1
            self.s.indent -= 1
        elif t == "struct":
            if _in(f.get("nullable"), v):
                e(f"if {val} is None:")
                e(f"    {w}.append(255)")
                e("else:")
                self.s.indent += 1
                e(f"{w}.append(1)")
                self.struct_body(f["fields"], val, w)
                self.s.indent -= 1
            else:
                self.struct_body(f["fields"], val, w)
        elif t in _FIXED:
            got = f"_uuidb({val})" if t == "uuid" else val
            e(f"{w} += {self.s.struct(_FIXED[t][0])}.pack({got})")
        else:
            self.blob(w, val, t, compact)

    def tag_section(self, tagged: list[dict], d: str, w: str) -> None:
        e = self.s.emit
        tags = self.s.var("tg")
        e(f"{tags} = []")
        for f in sorted(tagged, key=lambda f: f["tag"]):
            e(f"if {f['name']!r} in {d}:")
            self.s.indent += 1
            sub = self.s.var("tw")
            e(f"{sub} = bytearray()")
            val = self.s.var("x")
            e(f"{val} = {d}[{f['name']!r}]")
            self.field(f, val, sub)
            e(f"{tags}.append(({f['tag']}, {sub}))")
            self.s.indent -= 1
        unk = self.s.var("uk")
        e(f"{unk} = {d}.get('_unknown_tagged_fields')")
        e(f"if {unk}:")
        e(f"    {tags}.extend({unk}.items()); {tags}.sort(key=lambda t: t[0])")
        e(f"if not {tags}: {w}.append(0)")
        e("else:")
        self.s.indent += 1
        e(f"_wuv({w}, len({tags}))")
        tag, data = self.s.var("t"), self.s.var("b")
        e(f"for {tag}, {data} in {tags}:")
        e(f"    _wuv({w}, {tag}); _wuv({w}, len({data})); {w} += {data}")
        self.s.indent -= 1


_LINE_MAPS: dict[str, list[str]] = {}


def compile_schema(fields: list[dict], version: int, flexible: bool, label: str):
    """Returns (decode(buf, pos) -> (dict, pos), encode(dict, bytearray) -> None)."""
    src = _Source(label)
    dec = _Decoder(src, version, flexible)
    src.emit("mv = buf if type(buf) is memoryview else memoryview(buf)")
    src.emit("end = len(buf)")
    dec.struct_body(fields, "root", "")
    src.emit("return root, pos")
    names = [k for k in sorted(src.consts) if k.startswith(("_u_", "_arr_", "_carr_", "_cskip_"))]
    names += ["_uuid", "_uv", "_Bad", "_unpack", "str", "list", "range", "memoryview"]
    local = ", ".join(f"{k}={k}" for k in names)
    dec_lines = [f"def decode(buf, pos, *, {local}):"] + src.lines
    dec_paths = [""] + src.paths
    src.lines, src.paths, src.indent = [], [], 1
    enc = _Encoder(src, version, flexible)
    enc.struct_body(fields, "d", "w")
    src.emit("return w")
    enc_lines = ["def encode(d, w):"] + src.lines
    code = "\n".join(dec_lines + [""] + enc_lines) + "\n"
    filename = f"<kafkawire {label}>"
    namespace = dict(_RUNTIME)
    namespace.update(src.consts)
    exec(compile(code, filename, "exec"), namespace)
    _LINE_MAPS[filename] = dec_paths
    namespace["decode"].source = code  # for reading what was generated: codec(3, 12, "response")[0].source
    return namespace["decode"], namespace["encode"]


def explain_failure(exc: BaseException) -> tuple[str, int | None, str]:
    """(field path, byte offset, reason) of an exception raised inside generated code."""
    field, offset = "", None
    tb = exc.__traceback__
    while tb is not None:
        paths = _LINE_MAPS.get(tb.tb_frame.f_code.co_filename)
        if paths is not None:
            line = tb.tb_lineno - 1
            if 0 <= line < len(paths):
                field = paths[line]
            pos = tb.tb_frame.f_locals.get("pos")
            offset = pos if isinstance(pos, int) else None
        tb = tb.tb_next
    if isinstance(exc, _Bad):
        reason = str(exc)
    elif isinstance(exc, (struct.error, IndexError)):
        reason = "frame ends in the middle of the field"
    elif isinstance(exc, UnicodeDecodeError):
        reason = f"invalid UTF-8 in string: {exc.reason}"
    else:
        reason = f"{type(exc).__name__}: {exc}"
    return field, offset, reason
