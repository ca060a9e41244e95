"""scripts/import_cycles.py: src/tidemark has no import cycle, and the finder sees the hidden ones."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "import_cycles.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("import_cycles", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_src_tidemark_has_no_import_cycle() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.stdout.strip().splitlines()[-1] == "import cycles: 0 groups, 0 modules", result.stdout
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_state_package_does_not_import_the_changelog_package() -> None:
    """State backends are below the changelog: the changelog backend wraps them and its reader
    and writer carry their changes, never the other way round (no package-level loop)."""
    graph = _load_script().import_graph(REPO / "src" / "tidemark")
    upward = sorted((module, target) for module, targets in graph.items()
                    if module == "tidemark.state" or module.startswith("tidemark.state.")
                    for target in targets if target.startswith("tidemark.changelog"))
    assert upward == []


def test_finder_reports_cycles_through_function_and_type_checking_imports(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    _write(package, "__init__.py", "")
    # cycle 1: a -> b at module level, b -> a inside a function
    _write(package, "a.py", "from pkg import b\n")
    _write(package, "b.py", "def later():\n    from . import a\n    return a\n")
    # cycle 2: sub.c -> d via a relative import, d -> sub.c only under TYPE_CHECKING
    _write(package, "sub/__init__.py", "")
    _write(package, "sub/c.py", "from ..d import thing\n")
    _write(
        package,
        "d.py",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.sub.c\nthing = 1\n",
    )
    # no cycle: e imports a, nothing imports e
    _write(package, "e.py", "import pkg.a\n")

    result = subprocess.run(
        [sys.executable, str(SCRIPT), str(package)], capture_output=True, text=True, timeout=60, check=False
    )

    assert result.returncode == 1
    assert "import cycles: 2 groups, 4 modules" in result.stdout
    finder = _load_script()
    groups = finder.cycle_groups(finder.import_graph(package))
    assert sorted(groups) == [["pkg.a", "pkg.b"], ["pkg.d", "pkg.sub.c"]]


def test_package_import_counts_as_its_init(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    _write(package, "__init__.py", "from pkg.inner.x import value\n")
    _write(package, "inner/__init__.py", "from pkg.y import other\n")
    _write(package, "inner/x.py", "value = 1\n")
    _write(package, "y.py", "import pkg.inner\nother = 2\n")

    finder = _load_script()
    graph = finder.import_graph(package)

    assert "pkg.inner" in graph["pkg.y"]
    assert finder.cycle_groups(graph) == [["pkg.inner", "pkg.y"]]


def test_tarjan_handles_a_long_chain_without_recursion() -> None:
    finder = _load_script()
    size = 5000
    graph = {f"m{i}": {f"m{i + 1}"} for i in range(size)}
    graph[f"m{size}"] = {"m0"}

    groups = finder.strongly_connected_components(graph)

    assert len(groups) == 1 and len(groups[0]) == size + 1
