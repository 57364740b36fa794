"""No import cycle in the daemon: run by ``make lint``; exits 1 naming the modules of any cycle.

Reads the imports of ``memman_daemon`` with grimp (import-linter's graph) and finds the
strongly connected groups of modules (Tarjan). Imports under ``if TYPE_CHECKING:`` count too:
a module that names another's type in its annotations depends on it as much as one that calls
it, and every part gets the parts it uses as constructor arguments (``memman_daemon/app.py``),
so nothing needs to name the app to reach a sibling. ``--run-time`` counts only the imports
that run.
"""

from __future__ import annotations

import sys

import grimp

PACKAGE = "memman_daemon"


def cycles(graph: grimp.ImportGraph, package: str) -> list[list[str]]:
    """The groups of two or more modules of ``package`` that import each other in a loop."""
    mods = sorted(m for m in graph.modules if m == package or m.startswith(package + "."))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:  # recursive: the package has ~100 modules
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.find_modules_directly_imported_by(v)):
            if w not in low and w not in mods:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(mods) + 100))
    for m in mods:
        if m not in index:
            visit(m)
    return found


def main(argv: list[str]) -> int:
    type_checking = "--run-time" not in argv
    graph = grimp.build_graph(PACKAGE, exclude_type_checking_imports=not type_checking,
                              cache_dir=None)
    found = cycles(graph, PACKAGE)
    what = "imports (type-checking ones included)" if type_checking else "run-time imports"
    if not found:
        print(f"no import cycle in {PACKAGE} ({what})")
        return 0
    for group in found:
        print(f"import cycle in {PACKAGE} ({what}), {len(group)} modules: {', '.join(group)}")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
