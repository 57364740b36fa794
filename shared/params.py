"""Declared parameter schemas: what every method accepts, checked before anything changes.

Pure validation, no daemon dependency: the method declarations (``memman.api``) hold these
specs, the daemon checks every request with them, and the generator derives the client
signatures and the protocol table from them. Each method's positional parameters are declared
with a ``Param`` holding a ``Spec``. A spec
checks a decoded msgpack value and returns it normalized (bin decoded to text where text is
wanted), or raises -32602 naming the path of the bad value (``opts.limit``,
``data.entries[3].id``). The same specs generate the fuzzer's bad values
(``Spec.bad_samples``) and a valid sample (``Spec.sample``), so what is documented, what is
checked and what is attacked cannot drift apart.

Rules common to all:

- integers fit SQLite's signed 64-bit range (and the spec's own bounds); a bool is not an
  integer; a float is not an integer;
- numbers are finite (NaN and ±inf are refused);
- text is str, or bin holding valid UTF-8; ids are 1..``MAX_ID_BYTES`` bytes with no NUL;
- maps that a value is stored from (metadata, tool arguments, cached results, learned values)
  hold only what JSON stores: nil, bool, int64, finite float, text, arrays and maps with text
  keys — no bin, no ext — and at most ``MAX_STORED_ITEMS`` items in all;
- an optional options map may also arrive as an empty array (Neovim's Lua sends ``{}`` as
  ``[]``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgpack

from memman.errors import invalid_params

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAX_ID_BYTES = 512  #: longest id (session, user, tenant, document, key), in UTF-8 bytes
MAX_DEPTH = 64  #: deepest nesting of a stored free-form value
#: most items (map entries and array elements, at every depth) one stored free-form value may
#: hold: a metadata map of 500k keys fits the frame cap, but each key costs a few hundred bytes
#: in memory (the value, its JSON, the entry that keeps it), so the frame cap alone let one
#: request grow the daemon by hundreds of MB
MAX_STORED_ITEMS = 100_000

_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "a boolean",
          dict: "a map", list: "an array", type(None): "nil", bytes: "binary data"}


def is_array(value: Any) -> bool:
    """A msgpack array (an ext value decodes to a tuple subclass: not an array)."""
    return isinstance(value, list) or (isinstance(value, tuple)
                                       and not isinstance(value, msgpack.ExtType))


def kind(value: Any) -> str:
    if isinstance(value, msgpack.ExtType):
        return f"a msgpack ext value (type {value.code})"
    if is_array(value):
        return "an array"
    return _NAMES.get(type(value), f"a {type(value).__name__}")


def map_key(key: Any, path: str) -> str:
    """A map's key as text (msgpack may send it as bytes); -32602 at ``path`` otherwise."""
    if isinstance(key, bytes):
        try:
            key = key.decode()
        except UnicodeDecodeError:
            raise invalid_params(path, "map keys must be UTF-8 text") from None
    if not isinstance(key, str):
        raise invalid_params(path, f"map keys must be strings, got {kind(key)}")
    return key


class Spec:
    """One value's rule. Subclasses implement ``check``, ``sample`` and ``bad_samples``."""

    doc = "any value"
    #: the Python type a client passes (the typed client methods are generated from it)
    py_type = "Any"

    def check(self, value: Any, path: str) -> Any:
        raise NotImplementedError

    def sample(self) -> Any:
        """A valid value (the fuzzer builds its baseline calls from these)."""
        raise NotImplementedError

    def bad_samples(self) -> list[Any]:
        """Values this spec must refuse (the fuzzer sends each, at this spec's path)."""
        return []

    def edge_samples(self) -> list[Any]:
        """Valid values at the edges (bounds, empty, odd text): the handler must cope."""
        return [self.sample()]


def _wrong(path: str, want: str, value: Any) -> Exception:
    return invalid_params(path, f"expected {want}, got {kind(value)}")


_GENERIC_BAD: list[Any] = [None, True, 2**64 - 1, -(2**63), float("nan"), float("inf"),
                           "x", b"\xff\xfe", [], [[1]], {}, {"k": {"z": 1}}]


@dataclass
class Int(Spec):
    py_type = "int"
    min: int = INT64_MIN
    max: int = INT64_MAX
    doc: str = "an integer"

    def check(self, value: Any, path: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _wrong(path, self.doc, value)
        if not self.min <= value <= self.max:
            raise invalid_params(path, f"must be from {self.min} to {self.max}, got {value}")
        return value

    def sample(self) -> int:
        return max(self.min, min(self.max, 1))

    def edge_samples(self) -> list[Any]:
        return sorted({self.min, self.max, max(self.min, min(self.max, 0))})

    def bad_samples(self) -> list[Any]:
        out = [v for v in _GENERIC_BAD if not (isinstance(v, int) and not isinstance(v, bool)
                                               and self.min <= v <= self.max)]
        if self.min > INT64_MIN:
            out.append(self.min - 1)
        if self.max < INT64_MAX:
            out.append(self.max + 1)
        out.append(1.5)
        return out


@dataclass
class Float(Spec):
    py_type = "float"
    min: float = -1e300
    max: float = 1e300
    doc: str = "a number"

    def check(self, value: Any, path: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _wrong(path, self.doc, value)
        if isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
            raise invalid_params(path, f"must be from {self.min} to {self.max}, got {value}")
        value = float(value)
        if not math.isfinite(value):
            raise invalid_params(path, f"must be a finite number, got {value}")
        if not self.min <= value <= self.max:
            raise invalid_params(path, f"must be from {self.min} to {self.max}, got {value}")
        return value

    def sample(self) -> float:
        return float(max(self.min, min(self.max, 0.5)))

    def edge_samples(self) -> list[Any]:
        return [self.min, self.max, float(max(self.min, min(self.max, 0.0)))]

    def bad_samples(self) -> list[Any]:
        return [None, True, float("nan"), float("inf"), float("-inf"), "1", b"\x01", [], {},
                self.max * 2 + 1 if self.max < 1e300 else 2**64 - 1]


@dataclass
class Bool(Spec):
    py_type = "bool"
    doc: str = "a boolean"

    def check(self, value: Any, path: str) -> bool:
        if not isinstance(value, bool):
            raise _wrong(path, self.doc, value)
        return value

    def sample(self) -> bool:
        return True

    def edge_samples(self) -> list[Any]:
        return [False, True]

    def bad_samples(self) -> list[Any]:
        return [None, 1, 0, "true", float("nan"), [], {}]


@dataclass
class Str(Spec):
    py_type = "str"
    min_len: int = 0  #: characters
    max_len: int | None = None  #: characters
    max_bytes: int | None = None  #: UTF-8 bytes; None = bounded only by the frame size
    choices: tuple[str, ...] | None = None
    no_nul: bool = False
    strip_empty: bool = False  #: whitespace only counts as empty
    doc: str = "a string"
    example: str = "x"

    def check(self, value: Any, path: str) -> str:
        if isinstance(value, (bytes, bytearray)):
            try:
                value = bytes(value).decode()
            except UnicodeDecodeError:
                raise invalid_params(path, "must be valid UTF-8 text") from None
        if not isinstance(value, str):
            raise _wrong(path, self.doc, value)
        if self.choices is not None and value not in self.choices:
            raise invalid_params(path, f"must be one of {', '.join(map(repr, self.choices))}; "
                                       f"got {value[:80]!r}")
        n = len(value.strip()) if self.strip_empty else len(value)
        if n < self.min_len:
            raise invalid_params(path, "must not be empty" if self.min_len == 1 else
                                 f"needs at least {self.min_len} characters")
        if self.max_len is not None and len(value) > self.max_len:
            raise invalid_params(path, f"longer than {self.max_len} characters")
        if self.max_bytes is not None and len(value.encode("utf-8", "surrogatepass")) > self.max_bytes:
            raise invalid_params(path, f"longer than {self.max_bytes} bytes")
        if self.no_nul and "\x00" in value:
            raise invalid_params(path, "must not contain NUL characters")
        # (text from the wire is valid UTF-8 already: the decoder refuses anything else)
        return value

    def sample(self) -> str:
        return self.choices[0] if self.choices else self.example

    def edge_samples(self) -> list[Any]:
        if self.choices:
            return list(self.choices)
        cands: list[Any] = ["", " ", "../../etc", "/abs/path", "%2F..", "é\u2028\U0001f600",
                            "a\x00b", "'; DROP TABLE entries; --", "\"NEAR(x", "x" * 5000,
                            "x" * (self.max_bytes or 100_000), b"bin-utf8"]
        out = []
        for c in cands:
            try:
                self.check(c, "")
            except Exception:  # noqa: BLE001 - not valid for this spec: not an edge
                continue
            out.append(c)
        return out

    def bad_samples(self) -> list[Any]:
        out: list[Any] = [None, 1, True, 1.5, float("nan"), [], {}, b"\xff\xfe", [b"x"]]
        if self.min_len:
            out.append("")
        if self.max_bytes is not None:
            out.append("a" * (self.max_bytes + 1))
        if self.max_len is not None:
            out.append("a" * (self.max_len + 1))
        if self.choices is not None:
            out.append("not-a-choice")
        if self.no_nul:
            out.append("a\x00b")
        return out


def Id(example: str = "x", **kw: Any) -> Str:  # noqa: N802 - reads like a type in specs
    """A name (session, user, tenant, document, key): 1..MAX_ID_BYTES bytes, no NUL."""
    return Str(min_len=1, max_bytes=MAX_ID_BYTES, no_nul=True, doc="an id (a non-empty string)",
               example=example, **kw)


@dataclass
class Nullable(Spec):
    inner: Spec

    @property
    def doc(self) -> str:  # type: ignore[override]
        return f"{self.inner.doc} or nil"

    @property
    def py_type(self) -> str:  # type: ignore[override]
        return f"{self.inner.py_type} | None"

    def check(self, value: Any, path: str) -> Any:
        return None if value is None else self.inner.check(value, path)

    def sample(self) -> Any:
        return self.inner.sample()

    def bad_samples(self) -> list[Any]:
        return [v for v in self.inner.bad_samples() if v is not None]

    def edge_samples(self) -> list[Any]:
        return [None, *self.inner.edge_samples()]


@dataclass
class Stored(Spec):
    """A free-form value that is stored as JSON (metadata, tool arguments, cached results)."""

    doc: str = "a value JSON can store"

    def check(self, value: Any, path: str) -> Any:
        return _stored(value, path, 0, [MAX_STORED_ITEMS, path])

    def sample(self) -> Any:
        return {"k": [1, "v", 2.5, None, True]}

    def edge_samples(self) -> list[Any]:
        deep: Any = "bottom"
        for _ in range(MAX_DEPTH - 1):
            deep = [deep]
        return [None, "", INT64_MAX, INT64_MIN, -0.0, 1e308, {"": None}, [], {}, deep,
                {"k": "é" * 1000}]

    def bad_samples(self) -> list[Any]:
        return [b"\x00bin", float("nan"), float("inf"), 2**64 - 1, {"k": b"\x01"},
                {1: "int key"}, [float("-inf")], {"a": {"b": [2**63]}}, msgpack.ExtType(5, b"x"),
                [msgpack.ExtType(1, b"")]]


def _stored(value: Any, path: str, depth: int, room: list[Any]) -> Any:
    """``room`` is [items left for the whole value, the value's path], shared by the
    recursion; checked before a container is walked, so a refused value costs no copy."""
    if depth > MAX_DEPTH:
        raise invalid_params(path, f"nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, (dict, list, tuple)):
        room[0] -= len(value)
        if room[0] < 0:
            raise invalid_params(room[1], f"holds more than {MAX_STORED_ITEMS} items (map "
                                          "entries and array elements at every depth: the "
                                          "limit of one stored value)")
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise invalid_params(path, f"integer {value} does not fit 64 bits (signed)")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise invalid_params(path, f"must be a finite number, got {value}")
        return value
    if is_array(value):
        return [_stored(v, f"{path}[{i}]", depth + 1, room) for i, v in enumerate(value)]
    if isinstance(value, dict):
        out = {}
        for key, v in value.items():
            k = map_key(key, path)
            out[k] = _stored(v, f"{path}.{k}", depth + 1, room)
        return out
    if isinstance(value, (bytes, bytearray)):
        raise invalid_params(path, "binary data cannot be stored as JSON; send text (e.g. base64)")
    raise invalid_params(path, f"{kind(value)} cannot be stored as JSON (msgpack ext values "
                               "are refused)")


@dataclass
class Array(Spec):
    py_type = "list"
    item: Spec = field(default_factory=Stored)
    max_items: int | None = None
    min_items: int = 0
    doc: str = "an array"

    def check(self, value: Any, path: str) -> list[Any]:
        if not is_array(value):
            raise _wrong(path, self.doc, value)
        if len(value) < self.min_items:
            raise invalid_params(path, f"needs at least {self.min_items} items")
        if self.max_items is not None and len(value) > self.max_items:
            raise invalid_params(path, f"more than {self.max_items} items")
        return [self.item.check(v, f"{path}[{i}]") for i, v in enumerate(value)]

    def sample(self) -> list[Any]:
        return [self.item.sample()] if self.min_items else []

    def edge_samples(self) -> list[Any]:
        return [[], *[[e] for e in self.item.edge_samples()[:8]]]

    def bad_samples(self) -> list[Any]:
        out: list[Any] = [None, 1, "x", {"a": 1}, float("nan")]
        out += [[b] for b in self.item.bad_samples()[:6]]
        return out


@dataclass
class Map(Spec):
    """A map with declared keys. ``rest`` (when set) checks keys that are not declared;
    otherwise an unknown key is refused, naming it and the known ones."""
    py_type = "dict"

    fields: dict[str, Spec] = field(default_factory=dict)
    required: tuple[str, ...] = ()
    rest: Spec | None = None
    empty_array_ok: bool = True  #: Neovim sends an empty Lua table {} as []
    max_keys: int | None = None
    doc: str = "a map"
    validate: Callable[[dict[str, Any], str], None] | None = None  #: cross-field rules

    def check(self, value: Any, path: str) -> dict[str, Any]:
        if self.empty_array_ok and is_array(value) and not value:
            value = {}
        if not isinstance(value, dict):
            raise _wrong(path, self.doc, value)
        if self.max_keys is not None and len(value) > self.max_keys:
            raise invalid_params(path, f"more than {self.max_keys} keys")
        out: dict[str, Any] = {}
        for key, v in value.items():
            k = map_key(key, path)
            sub = f"{path}.{k}" if path else k
            spec = self.fields.get(k, self.rest)
            if spec is None:
                known = ", ".join(sorted(self.fields)) or "none"
                raise invalid_params(sub, f"unknown key; known: {known}")
            out[k] = spec.check(v, sub)
        for k in self.required:
            if k not in out:
                raise invalid_params(f"{path}.{k}" if path else k, "missing (required)")
        if self.validate is not None:
            self.validate(out, path)
        return out

    def sample(self) -> dict[str, Any]:
        return {k: self.fields[k].sample() for k in self.required}

    def edge_samples(self) -> list[Any]:
        base = self.sample()
        out: list[Any] = [base]
        for k, spec in self.fields.items():
            out += [{**base, k: e} for e in spec.edge_samples()[:8]]
        return out

    def bad_samples(self) -> list[Any]:
        out: list[Any] = [None, 1, "x", [1], float("nan"), b"\x00"]
        if self.rest is None:
            out.append({"no_such_option": 1})
        return out

    def field_paths(self) -> list[tuple[str, Spec]]:
        return list(self.fields.items())


@dataclass
class AnyOf(Spec):
    options: tuple[Spec, ...]
    doc: str = "a value"

    @property
    def py_type(self) -> str:  # type: ignore[override]
        return " | ".join(dict.fromkeys(o.py_type for o in self.options))

    def check(self, value: Any, path: str) -> Any:
        errors: list[Exception] = []
        for opt in self.options:
            try:
                return opt.check(value, path)
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
        # the option of the value's own type says best what is wrong with it
        for error in errors:
            if ", got " not in str(error):
                raise error
        want = " or ".join(o.doc for o in self.options)
        raise invalid_params(path, f"expected {want}, got {kind(value)}")

    def sample(self) -> Any:
        return self.options[0].sample()

    def edge_samples(self) -> list[Any]:
        return [e for o in self.options for e in o.edge_samples()]

    def bad_samples(self) -> list[Any]:
        bad = []
        for v in _GENERIC_BAD:
            try:
                self.check(v, "")
            except Exception:  # noqa: BLE001
                bad.append(v)
        return bad


def from_type(t: Any) -> Spec:
    """The spec for a plain Python type in ``Param(name, type)`` (shorthand for a spec)."""
    if isinstance(t, Spec):
        return t
    if isinstance(t, tuple):
        if type(None) in t:
            rest = tuple(x for x in t if x is not type(None))
            inner = from_type(rest[0] if len(rest) == 1 else rest)
            return Nullable(inner)
        return AnyOf(tuple(from_type(x) for x in t))
    return {str: Str(), int: Int(), float: Float(), bool: Bool(), dict: Map(rest=Stored()),
            list: Array(), object: Stored()}[t]


_MISSING: Any = object()


@dataclass
class Param:
    """One positional parameter of a method: its name and its declared spec. A plain Python
    type is accepted as shorthand (``str`` -> ``Str()``, ``dict`` -> an open map).
    ``default``: leave out for a required parameter; ``dict`` / ``list`` mean a fresh empty
    map / array."""

    name: str
    types: Any = object  #: a Spec, or a Python type / tuple of types
    default: Any = _MISSING
    doc: str = ""
    spec: Spec = field(init=False)

    def __post_init__(self) -> None:
        self.spec = from_type(self.types)

    @property
    def required(self) -> bool:
        return self.default is _MISSING

    def default_value(self) -> Any:
        return self.default() if callable(self.default) else self.default

    def check(self, value: Any) -> Any:
        if not self.required and value is None and isinstance(self.spec, Map):
            return self.default_value()  # nil for an optional options map: "no options"
        return self.spec.check(value, self.name)

    def default_text(self) -> str | None:
        """The default as a literal (``{}``, ``[]``, ``'x'``); None for a required one."""
        if self.required:
            return None
        return repr(self.default_value())

    def signature(self) -> str:
        """``name: type`` or ``name: type = default``, as a Python signature has it."""
        default = self.default_text()
        head = f"{self.name}: {self.spec.py_type}"
        return head if default is None else f"{head} = {default}"


# --- shared building blocks -----------------------------------------------------------------
COUNT = Int(0, 2**53, doc="a non-negative integer")
#: a number of tokens (counted by the daemon or reported by the agent)
TOKENS = Int(0, 2**40, doc="a token count (a non-negative integer)")
#: a budget of tokens (a session's or one context request's)
MAX_TOKENS = Int(1, 2**31, doc="a positive integer (tokens)")
POSITIVE = Int(1, 2**53, doc="a positive integer")
ROW_ID = Int(0, INT64_MAX, doc="an id (a non-negative integer)")
UNIT = Float(0.0, 1.0, doc="a number from 0 to 1")
SECONDS = Float(0.0, 1e12, doc="seconds (a finite number >= 0)")
TIMESTAMP = Float(0.0, 1e11, doc="unix seconds")
TEXT = Str()
#: ``private`` hides an entry from every other session: a boolean only, so that 1, "true" or
#: "yes" are refused rather than taken for public
METADATA = Map({"private": Bool(doc="a boolean (true: never shown outside its own session)")},
               rest=Stored(), max_keys=MAX_STORED_ITEMS, doc="a map (metadata)")
#: a tool call's ``function`` as the chat API has it: a map whose name is text
TOOL_FUNCTION = Map({"name": Str(max_bytes=1024), "arguments": Stored()}, rest=Stored(),
                    empty_array_ok=False, doc="a map {name, arguments}")
#: one tool call of an entry (``session_add``, an import file): {id, type, function}
TOOL_CALL = Map({"id": Str(min_len=1, max_bytes=1024), "type": Str(max_bytes=64),
                 "function": TOOL_FUNCTION, "name": Str(max_bytes=1024)},
                required=("id",), rest=Stored(), empty_array_ok=False,
                doc="a map {id, type, function: {name, arguments}}")
#: one tool call of a chat message whose tokens are counted (an id is not needed there)
CHAT_TOOL_CALL = Map({"id": Str(max_bytes=1024), "type": Str(max_bytes=64),
                      "function": TOOL_FUNCTION, "name": Str(max_bytes=1024)},
                     rest=Stored(), empty_array_ok=False,
                     doc="a map {id, type, function: {name, arguments}}")
