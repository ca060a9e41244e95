"""Find import cycles inside a Python package.

Every `import` statement counts: module level, inside functions and under `if TYPE_CHECKING:`.
Relative imports are resolved; importing a package counts as importing its `__init__`, and
`from pkg import name` counts as importing the submodule `pkg.name` when one exists.

Usage: python scripts/import_cycles.py [PACKAGE_DIR]   (default: src/tidemark)
Prints each cycle group (a strongly connected component of more than one module, or a module
importing itself) and a summary line `import cycles: N groups, M modules`; exits 1 if any.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

DEFAULT_PACKAGE = Path(__file__).resolve().parent.parent / "src" / "tidemark"


def module_names(package_dir: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every `.py` file under the package directory."""
    root = package_dir.parent
    modules: dict[str, Path] = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _resolve_relative(module: str, is_package: bool, level: int, target: str | None) -> str:
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def imported_modules(module: str, path: Path, known: set[str]) -> set[str]:
    """The modules of `known` that `module` (stored at `path`) imports anywhere in its body.

    Each import names one target: `import a.b` -> `a.b`; `from a import n` -> `a.n` when that is
    a module, else `a` (the package's `__init__`). The target's parent packages run first, so they
    count too, except `module` itself and the packages that contain it: Python has started running
    those before `module`, so only an explicit import of them is an edge.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    targets: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _resolve_relative(module, is_package, node.level, node.module)
            else:
                base = node.module or ""
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                targets.add(submodule if submodule in known else base)
    found: set[str] = set()
    for target in targets:
        found.add(target)
        parts = target.split(".")
        for end in range(1, len(parts)):
            parent = ".".join(parts[:end])
            if parent != module and not _is_ancestor_package(parent, module):
                found.add(parent)
    return {name for name in found if name in known}


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    modules = module_names(package_dir)
    known = set(modules)
    return {name: imported_modules(name, path, known) for name, path in modules.items()}


def _is_ancestor_package(package: str, module: str) -> bool:
    return module.startswith(package + ".")


def strongly_connected_components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative; components in discovery order, each sorted."""
    index: dict[str, int] = {}
    lowlink: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, list[str]]] = []
        index[start] = lowlink[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        work.append((start, sorted(graph[start])))
        while work:
            node, successors = work[-1]
            if successors:
                succ = successors.pop(0)
                if succ not in index:
                    index[succ] = lowlink[succ] = counter
                    counter += 1
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, sorted(graph.get(succ, ()))))
                elif succ in on_stack:
                    lowlink[node] = min(lowlink[node], index[succ])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                lowlink[parent] = min(lowlink[parent], lowlink[node])
            if lowlink[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


def cycle_groups(graph: dict[str, set[str]]) -> list[list[str]]:
    """Components that form a cycle: more than one module, or a module importing itself."""
    return [
        group
        for group in strongly_connected_components(graph)
        if len(group) > 1 or group[0] in graph.get(group[0], set())
    ]


def main(argv: list[str]) -> int:
    package_dir = Path(argv[1]) if len(argv) > 1 else DEFAULT_PACKAGE
    if not (package_dir / "__init__.py").is_file():
        print(f"import_cycles: {package_dir} is not a package directory", file=sys.stderr)
        return 2
    groups = cycle_groups(import_graph(package_dir))
    for number, group in enumerate(groups, start=1):
        print(f"cycle group {number} ({len(group)} modules):")
        for name in group:
            print(f"  {name}")
    print(f"import cycles: {len(groups)} groups, {sum(len(g) for g in groups)} modules")
    return 1 if groups else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
