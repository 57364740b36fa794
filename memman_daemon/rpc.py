"""The method registry: protocol method names -> handlers, with parameter checking.

A handler takes a ``Call`` and its declared parameters by name, and never touches the socket.
It is an ``async def`` when it awaits anything (writes, LLM calls); a pure in-memory read may be
a plain ``def``, which the server answers inline without creating a task. Params arrive as a msgpack array (positional, as msgpack-rpc has it);
trailing optional parameters may be left out. Every parameter has a declared spec
(``memman_daemon.params``); a bad value anywhere inside it is answered with -32602 naming its path
(``opts.limit``), before the handler runs.

    @method("memman_session_get", Param("session_id", str))
    async def session_get(call: Call, session_id: str) -> dict: ...
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memman.errors import METHOD_NOT_FOUND, MemmanError, invalid_params
from memman_daemon.params import Map, Spec, from_type

if TYPE_CHECKING:
    from memman_daemon.app import App

_MISSING = object()


@dataclass
class Param:
    """One positional parameter: its name and its declared spec (memman_daemon.params). A plain
    Python type is accepted as shorthand (``str`` -> ``Str()``, ``dict`` -> an open map)."""

    name: str
    types: Any = object  #: a params.Spec, or a Python type / tuple of types
    default: Any = _MISSING  #: leave out for a required parameter
    doc: str = ""
    spec: Spec = field(init=False)

    def __post_init__(self) -> None:
        self.spec = from_type(self.types)

    @property
    def required(self) -> bool:
        return self.default is _MISSING

    def check(self, value: Any) -> Any:
        if not self.required and value is None and self._nil_means_default():
            return self.default() if callable(self.default) else self.default
        return self.spec.check(value, self.name)

    def _nil_means_default(self) -> bool:
        # nil for an optional options map means "no options" (as an omitted parameter)
        return isinstance(self.spec, Map)


@dataclass
class Call:
    """What a handler knows about the request it serves."""

    app: App
    client_name: str = ""  #: the connection's self-declared name (for audit), or "conn-<n>"
    connection: Any = None  #: the server's connection object (subscriptions live there)


Handler = Callable[..., Any]  #: async def, or a plain def for in-memory reads


@dataclass
class Method:
    name: str
    handler: Handler
    params: tuple[Param, ...]
    doc: str = ""
    writes: bool = False  #: refused when the daemon runs read-only
    is_async: bool = True  #: a plain function is answered inline (in-memory reads)
    #: its parameters may be large (an import file): checked on a worker thread, not the loop
    offload: bool = False

    def bind(self, params: Any) -> dict[str, Any]:
        if not isinstance(params, (list, tuple)):
            raise MemmanError(-32602, f"invalid params for {self.name}: params must be an array, "
                                      f"got {type(params).__name__}")
        if len(params) > len(self.params):
            raise MemmanError(-32602, f"invalid params for {self.name}: takes at most "
                                      f"{len(self.params)} parameters, got {len(params)}")
        kwargs: dict[str, Any] = {}
        for i, p in enumerate(self.params):
            if i < len(params):
                kwargs[p.name] = p.check(params[i])
            elif p.required:
                raise invalid_params(p.name, f"missing (required parameter {i + 1} of {self.name})")
            else:
                kwargs[p.name] = p.default() if callable(p.default) else p.default
        return kwargs


@dataclass
class Registry:
    methods: dict[str, Method] = field(default_factory=dict)

    def method(self, name: str, *params: Param, writes: bool = False,
               offload: bool = False) -> Callable[[Handler], Handler]:
        def register(fn: Handler) -> Handler:
            if name in self.methods:
                raise RuntimeError(f"method {name} registered twice")
            self.methods[name] = Method(name, fn, params, (fn.__doc__ or "").strip(), writes,
                                        inspect.iscoroutinefunction(fn), offload)
            return fn
        return register

    def lookup(self, name: str) -> Method:
        try:
            return self.methods[name]
        except KeyError:
            raise MemmanError(METHOD_NOT_FOUND, f"unknown method '{name}'") from None



#: the one registry; API modules in memman_daemon.api register into it on import
REGISTRY = Registry()
method = REGISTRY.method
