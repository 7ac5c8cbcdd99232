"""The dependency rules of DESIGN.md, read from the source: no import cycle between soak's
modules, and each layer imports only the layers below it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("soak", "workloads")


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((REPO / pkg).rglob("*.py"))}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Every module of ours that ``name`` imports, wherever the import stands (module level,
    inside a function, under TYPE_CHECKING): each is a dependency."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            # `from pkg import sub` imports the submodule where one exists, else pkg itself
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                for alias in node.names
            ]
        else:
            continue
        for target in targets:
            while target and target not in known:  # `import a.b.c` of an attribute path
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):
                found.add(target)
    return found


def graph() -> dict[str, set[str]]:
    modules = all_modules()
    known = set(modules)
    return {name: imports_of(name, path, known) for name, path in modules.items()}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path that returns to its start, or None (depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_cycle_finder_finds_a_cycle_it_is_given() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycle_between_soaks_modules() -> None:
    cycle = find_cycle(graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


@pytest.mark.parametrize(
    ("importer", "forbidden"),
    [
        ("soak.devices", ("soak.report", "soak.cli", "soak.runner", "workloads")),
        ("workloads", ("soak",)),
        ("soak.analysis", ("soak.report", "soak.cli", "soak.runner", "soak.devices")),
        ("soak.progress", ("soak.runner", "soak.live", "soak.cli")),
        ("soak.report", ("soak.runner", "soak.cli", "soak.devices")),
        ("soak.importers", ("soak.runner", "soak.cli", "soak.live", "soak.devices")),
        ("soak.live", ("soak.runner", "soak.cli", "soak.report", "soak.devices")),
        ("soak.store", ("soak.runner", "soak.cli", "soak.report", "soak.analysis")),
        ("soak.fleet", ("soak.runner", "soak.cli", "soak.store", "soak.devices", "soak.live")),
    ],
)
def test_layers_import_only_what_lies_below_them(importer: str, forbidden: tuple[str, ...]):
    bad = sorted(
        f"{name} imports {dep}"
        for name, deps in graph().items()
        if name == importer or name.startswith(importer + ".")
        for dep in deps
        if any(dep == f or dep.startswith(f + ".") for f in forbidden)
    )
    assert not bad, "; ".join(bad)


def test_the_run_records_sit_with_the_model() -> None:
    """soak/record.py is read by the store, the analysis and the report and written by the
    runner and the importers: it imports nothing of soak's but the model."""
    assert graph()["soak.record"] == {"soak.model"}


def test_only_the_vendor_modules_import_the_vendor_apis() -> None:
    owners = {"pynvml": "soak.devices.nvml", "amdsmi": "soak.devices.amd"}
    for name, path in all_modules().items():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            mods = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for mod in mods:
                root = mod.split(".")[0]
                if root in owners:
                    assert name == owners[root], f"{name} imports {root}"
