"""The method registry: each declared method (``memman.api``) bound to its handler.

A method is declared once, in ``shared/api.py`` (name, parameters with their schemas and
defaults, result type, ``writes``, doc); its handler here takes a ``Call`` and the declared
parameters by name, and never touches the socket:

    @handles(names.SESSION_GET)
    async def session_get(call: Call, session_id: str, opts: dict) -> dict: ...

A handler is an ``async def`` when it awaits anything (writes, LLM calls); a pure in-memory
read may be a plain ``def``, which the server answers inline without creating a task. Params
arrive as a msgpack array (positional, as msgpack-rpc has it); trailing optional parameters may
be left out. A bad value anywhere inside one is answered with -32602 naming its path
(``opts.limit``) before the handler runs — the declared schema is the one check.

Binding is checked when the handler's module is imported: a name that is not declared, a
second handler for one method, or parameters that differ from the declaration (names and
order) raise at once; ``Registry.check_complete`` (run by ``api.load_all``) refuses a declared
method that has no handler. The doc is the declaration's: a handler carries none.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memman import api
from memman.errors import METHOD_NOT_FOUND, MemmanError
from memman.params import Param

if TYPE_CHECKING:
    from memman_daemon.app import App

__all__ = ["REGISTRY", "Call", "Method", "Param", "Registry", "handles", "prechecks"]


@dataclass
class Call:
    """What a handler knows about the request it serves."""

    app: App
    client_name: str = ""  #: the connection's self-declared name (for audit), or "conn-<n>"
    connection: Any = None  #: the server's connection object (subscriptions live there)


Handler = Callable[..., Any]  #: async def, or a plain def for in-memory reads


@dataclass
class Method:
    """A declared method and the handler bound to it."""

    decl: api.Method
    handler: Handler
    is_async: bool = True  #: a plain function is answered inline (in-memory reads)
    #: a cheap bound checked on the raw parameters before the declared schema walks them
    #: (``prechecks``): an import of a million entries is refused in the time it takes to
    #: count them, not after its million entries were checked and copied
    precheck: Callable[[App, Any], None] | None = None

    @property
    def name(self) -> str:
        return self.decl.name

    @property
    def params(self) -> tuple[Param, ...]:
        return self.decl.params

    @property
    def doc(self) -> str:
        return self.decl.doc

    @property
    def writes(self) -> bool:
        """Refused when the daemon runs read-only."""
        return self.decl.writes

    @property
    def offload(self) -> bool:
        """Its parameters may be large (an import file): checked on a worker thread."""
        return self.decl.offload

    def bind(self, params: Any) -> dict[str, Any]:
        return self.decl.bind(params)


def _mismatch(decl: api.Method, fn: Handler) -> str | None:
    """Why ``fn`` cannot serve ``decl`` (None when it can)."""
    params = list(inspect.signature(fn).parameters.values())
    if not params or params[0].name != "call":
        return "its first parameter must be `call`"
    got = [p.name for p in params[1:]]
    want = [p.name for p in decl.params]
    if got != want:
        return f"it takes ({', '.join(got)}) but the declaration has ({', '.join(want)})"
    if any(p.default is not inspect.Parameter.empty for p in params[1:]):
        return "defaults belong to the declaration, not the handler"
    if fn.__doc__:
        return "the doc belongs to the declaration (memman/api.py), not the handler"
    return None


@dataclass
class Registry:
    methods: dict[str, Method] = field(default_factory=dict)
    declared: dict[str, api.Method] = field(default_factory=lambda: dict(api.BY_NAME))

    def handles(self, name: str) -> Callable[[Handler], Handler]:
        """Bind the decorated function to the declared method ``name``."""
        def register(fn: Handler) -> Handler:
            where = f"{fn.__module__}.{fn.__qualname__}"
            decl = self.declared.get(name)
            if decl is None:
                raise RuntimeError(f"{where} handles {name!r}, which memman/api.py does not "
                                   "declare: add a Method(...) there")
            if name in self.methods:
                raise RuntimeError(f"method {name} has two handlers: "
                                   f"{self.methods[name].handler.__qualname__} and {where}")
            why = _mismatch(decl, fn)
            if why is not None:
                raise RuntimeError(f"{where} cannot handle {name}: {why}")
            self.methods[name] = Method(decl, fn, inspect.iscoroutinefunction(fn))
            return fn
        return register

    def prechecks(self, name: str) -> Callable[[Callable[[App, Any], None]], Any]:
        """Register a bound on ``name``'s raw parameters (``(app, params)``, raising
        ``MemmanError``), checked before its schema; the schema's check still follows."""
        def register(fn: Callable[[App, Any], None]) -> Any:
            self.methods[name].precheck = fn
            return fn
        return register

    def check_complete(self) -> None:
        """Every declared method has its handler (raises naming those that do not)."""
        missing = sorted(set(self.declared) - set(self.methods))
        if missing:
            raise RuntimeError(f"declared in memman/api.py without a handler: {missing}")

    def lookup(self, name: str) -> Method:
        try:
            return self.methods[name]
        except KeyError:
            raise MemmanError(METHOD_NOT_FOUND, f"unknown method '{name}'") from None


#: the one registry; API modules in memman_daemon.api register into it on import
REGISTRY = Registry()
handles = REGISTRY.handles
prechecks = REGISTRY.prechecks
