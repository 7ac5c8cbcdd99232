"""The dependency rules of docs/architecture.md, read from the source: no import cycle between
soak's modules, each layer imports only the layers below it, and bench and tests never import
each other (both may use testkit); and the equilibrium package has no function over 50
lines."""

from __future__ import annotations

import ast
import functools
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


@functools.cache
def _graph() -> dict[str, frozenset[str]]:
    modules = all_modules()
    known = set(modules)
    return {name: frozenset(imports_of(name, path, known)) for name, path in modules.items()}


def graph() -> dict[str, set[str]]:
    """The import graph of soak's modules (parsed once per session; a copy to change)."""
    return {name: set(deps) for name, deps in _graph().items()}


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
        ("soak.analysis", ("soak.report", "soak.cli", "soak.runner", "soak.devices", "soak.store")),
        ("soak.dataset", ("soak.store", "soak.analysis", "soak.report", "soak.pipeline")),
        ("soak.profile", ("soak.config", "soak.bmc", "soak.devices", "soak.nodegroup")),
        ("soak.progress", ("soak.runner", "soak.live", "soak.cli")),
        ("soak.report", ("soak.runner", "soak.cli", "soak.devices", "soak.store", "soak.pipeline")),
        ("soak.importers", ("soak.runner", "soak.cli", "soak.live", "soak.devices")),
        ("soak.live", ("soak.runner", "soak.cli", "soak.report", "soak.devices")),
        ("soak.store", ("soak.runner", "soak.cli", "soak.report", "soak.analysis")),
        ("soak.fleet", ("soak.runner", "soak.cli", "soak.store", "soak.devices", "soak.live")),
        # the engine stands under the features: what runs a soak never imports the fleet
        ("soak.runner", ("soak.fleet",)),
        ("soak.worker", ("soak.fleet",)),
        ("soak.nodegroup", ("soak.fleet", "soak.runner", "soak.cli")),
        # the BMC readers are a library under the runner, as the device backends are
        ("soak.bmc", ("soak.report", "soak.cli", "soak.runner", "soak.devices", "soak.analysis")),
    ],
)
def test_layers_import_only_what_lies_below_them(importer: str, forbidden: tuple[str, ...]):
    bad = layer_violations(graph(), importer, forbidden)
    assert not bad, "; ".join(bad)


def layer_violations(
    edges: dict[str, set[str]], importer: str, forbidden: tuple[str, ...]
) -> list[str]:
    return sorted(
        f"{name} imports {dep}"
        for name, deps in edges.items()
        if name == importer or name.startswith(importer + ".")
        for dep in deps
        if any(dep == f or dep.startswith(f + ".") for f in forbidden)
    )


def reached(edges: dict[str, set[str]], start: str) -> set[str]:
    """Every module that ``start`` (a module, or a package and its modules) imports,
    directly or through others: what it stands on."""
    todo = [name for name in edges if name == start or name.startswith(start + ".")]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += edges.get(name, ())
    return {name for name in seen if name != start and not name.startswith(start + ".")}


# What the analysis may stand on: the run's data and its acceptance profile, nothing that
# runs a soak (the engine: the run's configuration, devices, BMC, node group, runner,
# workers, the store, the CLI, the live view, importers, the fleet, the report).
DATA_LAYER = {
    "soak.dataset",
    "soak.profile",
    "soak.fields",
    "soak.model",
    "soak.record",
    "soak.validity",
    "soak.units",
    "soak.errors",
}


def test_the_analysis_stands_on_nothing_of_the_engine() -> None:
    """Transitively: what the analysis imports, and all that those import, is the data
    layer; soak.config (RunConfig: bmc, devices, nodegroup) is not in it."""
    extra = reached(graph(), "soak.analysis") - DATA_LAYER
    assert not extra, f"soak.analysis reaches {sorted(extra)}"


# The report's writers and what reads a run: only the pipeline puts the two together.
WRITERS = {"write_summary", "write_junit", "write_report"}
READERS = {"analyze_run", "analyze", "RunStore", "salvage", "truncated"}


def imported_names(path: Path) -> set[str]:
    """The names ``path`` imports from soak's modules (``from soak.x import name``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("soak"):
            found |= {alias.name for alias in node.names}
    return found


def pipelines(modules: dict[str, Path]) -> set[str]:
    """The modules that both analyse a run and write its outputs."""
    return {
        name
        for name, path in modules.items()
        if (names := imported_names(path)) & WRITERS and "analyze_run" in names
    }


def test_one_module_holds_the_pipeline_and_the_report_none() -> None:
    """soak.pipeline reads, analyses and writes; nothing else of soak writes a run's
    outputs; the report package neither reads a store nor runs the analysis (it formats an
    ``Analysis`` and draws a dataset's series), transitively."""
    modules = all_modules()
    assert pipelines(modules) == {"soak.pipeline"}
    writers = {name for name, path in modules.items() if imported_names(path) & WRITERS}
    assert writers == {"soak.pipeline"}
    report = {name: path for name, path in modules.items() if name.startswith("soak.report")}
    reads = {name: sorted(imported_names(path) & READERS) for name, path in report.items()}
    assert not any(reads.values()), reads
    assert not reached(graph(), "soak.report") & {"soak.store", "soak.blocks", "soak.pipeline"}
    for command in ("soak.cli.run", "soak.cli.reports", "soak.cli.importing"):
        assert "soak.pipeline" in graph()[command], command


def test_the_pipeline_rules_fail_on_what_they_forbid(tmp_path: Path) -> None:
    """The analysis reaching the run's configuration through one module, and a second
    module that analyses and writes, are both found."""
    edges = {**graph(), "soak.analysis.noise": graph()["soak.analysis.noise"] | {"soak.config"}}
    assert {"soak.config", "soak.bmc", "soak.nodegroup"} <= reached(edges, "soak.analysis")
    second = tmp_path / "second.py"
    second.write_text(
        "from soak.analysis.analyze import analyze_run\n"
        "from soak.report.summary import write_summary\n"
    )
    assert pipelines({**all_modules(), "soak.second": second}) == {"soak.pipeline", "soak.second"}


def test_the_run_records_sit_with_the_model() -> None:
    """soak/record.py is read by the store, the analysis and the report and written by the
    runner and the importers: it imports nothing of soak's but the model."""
    assert graph()["soak.record"] == {"soak.model"}


@pytest.mark.slow
def test_only_the_vendor_modules_import_the_vendor_apis() -> None:
    owners = {
        "pynvml": "soak.devices.nvml",
        "amdsmi": "soak.devices.amd",
        "redfish": "soak.bmc.redfish",
    }
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


def parent_face_imports(name: str, source: str, known: set[str]) -> list[str]:
    """The packages above ``name`` whose face (``__init__``) it imports: a module inside a
    package that imports the package's own ``__init__``, which in turn may import it back,
    is a circle the graph above cannot see (it leaves such imports out on purpose)."""
    path = Path(f"{name.replace('.', '/')}.py")
    # the top level's face holds only the version, which every layer may print
    parents = {".".join(name.split(".")[:n]) for n in range(2, name.count(".") + 1)}
    found = imports_of_source(name, path, source, known | parents)
    return sorted(parents & found)


def imports_of_source(name: str, path: Path, source: str, known: set[str]) -> set[str]:
    """Every module of ``known`` that ``source`` imports, parents included."""
    package = name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                for alias in node.names
            ]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def test_no_module_imports_its_parent_packages_face() -> None:
    modules = all_modules()
    known = set(modules)
    bad = [
        f"{name} imports {parent}"
        for name, path in modules.items()
        if path.name != "__init__.py"
        for parent in parent_face_imports(name, path.read_text(), known)
    ]
    assert not bad, "; ".join(bad)


def test_each_rule_fails_on_the_violation_it_forbids() -> None:
    """The rules above, fed one violation each: the runner importing the fleet, and a
    backend importing its package's face."""
    known = set(all_modules())
    source = "from soak.fleet.sbatch import write\n"
    edges = {
        **graph(),
        "soak.runner": imports_of_source("soak.runner", Path("r.py"), source, known),
    }
    assert layer_violations(edges, "soak.runner", ("soak.fleet",)) == [
        "soak.runner imports soak.fleet.sbatch"
    ]
    assert layer_violations(graph(), "soak.runner", ("soak.fleet",)) == []
    face = "from soak.devices import select\n"
    assert parent_face_imports("soak.devices.nvml", face, known) == ["soak.devices"]
    assert parent_face_imports("soak.devices.nvml", "from . import base\n", known) == []
    common = "from soak.devices.common import select\n"
    assert parent_face_imports("soak.devices.nvml", common, known) == []


# -- bench and tests ------------------------------------------------------------------------
# Both may use testkit/, the synthesis they share; neither imports nor loads the other, so a
# bench can change without breaking a test and a test's helper is never a bench's input.
TREES = {"tests": ("bench",), "bench": ("tests",), "testkit": ("bench", "tests")}
LOADERS = {"spec_from_file_location", "run_path", "run_module", "SourceFileLoader", "exec_module"}


def cross_tree_uses(source: str, other: str, path: str = "<source>") -> list[str]:
    """How ``source`` imports or loads the tree ``other`` (``bench`` or ``tests``): an import
    of it, a module name in it given to a loader (``runpy.run_module("bench.x")``), a path
    naming one of its .py files (``"bench/x.py"``, ``Path(...) / "bench" / "x.py"``), or a
    path into it beside a loader call (``spec_from_file_location``, ``runpy.run_path``, …).
    Naming its data (``Path(...) / "bench" / "data"``) is neither."""
    tree = ast.parse(source, path)
    docstrings = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    found: list[str] = []
    loads = False
    segment = False  # a path component `other` joined with `/`
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"imports {a.name}" for a in node.names if a.name.split(".")[0] == other]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            if node.module.split(".")[0] == other:
                found.append(f"imports {node.module}")
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in LOADERS or name == "import_module":
                loads = True
                for arg in node.args:
                    if isinstance(arg, ast.Constant) and str(arg.value).startswith(other + "."):
                        found.append(f"loads {arg.value}")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            strings = [n for n in ast.walk(node) if isinstance(n, ast.Constant)]
            strings.sort(key=lambda n: (n.lineno, n.col_offset))  # in the order written
            parts = [n.value for n in strings if isinstance(n.value, str)]
            if other in parts:
                segment = True
                if any(p.endswith(".py") for p in parts):
                    found.append(f"loads {'/'.join(parts)}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            named = text.startswith(other + "/") or f"/{other}/" in text
            if id(node) not in docstrings and text.endswith(".py") and named:
                found.append(f"loads {text}")
    if loads and segment and not any(f.startswith("loads") for f in found):
        found.append(f"loads a path into {other}/")
    return sorted(set(found))


@pytest.mark.slow
def test_bench_and_tests_do_not_import_each_other() -> None:
    bad = [
        f"{path.relative_to(REPO)} {use}"
        for tree, others in TREES.items()
        for path in sorted((REPO / tree).rglob("*.py"))
        for other in others
        for use in cross_tree_uses(path.read_text(), other, str(path))
    ]
    assert not bad, "; ".join(bad)


def test_the_bench_and_tests_rule_fails_on_each_way_across() -> None:
    by_path = (
        "import importlib.util\n"
        "path = Path(__file__).parents[2] / 'bench' / 'verdict_accuracy.py'\n"
        "spec = importlib.util.spec_from_file_location('verdict_accuracy', path)\n"
    )
    assert cross_tree_uses(by_path, "bench") == ["loads bench/verdict_accuracy.py"]
    split = "ROOT = REPO / 'bench'\nspec_from_file_location('m', ROOT / name)\n"
    assert cross_tree_uses(split, "bench") == ["loads a path into bench/"]
    assert cross_tree_uses("runpy.run_path('bench/real_traces.py')\n", "bench") == [
        "loads bench/real_traces.py"
    ]
    assert cross_tree_uses("runpy.run_module('bench.sim_speed')\n", "bench") == [
        "loads bench.sim_speed"
    ]
    assert cross_tree_uses("from bench.real_traces import cases\n", "bench") == [
        "imports bench.real_traces"
    ]
    assert cross_tree_uses("from tests.fleet.synth import write_fleet\n", "tests") == [
        "imports tests.fleet.synth"
    ]
    assert cross_tree_uses("import tests.factories\n", "tests") == ["imports tests.factories"]
    # the shared helpers, the other tree's data and its name in a docstring are not crossings
    fine = (
        '"""Loads nothing: see bench/real_traces.py"""\n'
        "from testkit.sim import simulate\n"
        "DATA = Path(__file__).parents[1] / 'bench' / 'data' / 'real-traces'\n"
    )
    assert cross_tree_uses(fine, "bench") == []


EQUILIBRIUM_MAX_LINES = 50  # the equilibrium package reads as its spec: no function past this


def long_functions(source: str, limit: int) -> list[tuple[str, int]]:
    """The functions of ``source`` longer than ``limit`` lines, with their lengths."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = node.end_lineno - node.lineno + 1
            if length > limit:
                found.append((node.name, length))
    return found


def test_no_function_of_the_equilibrium_package_is_over_50_lines() -> None:
    package = REPO / "soak" / "analysis" / "equilibrium"
    long = {
        f"{path.name}:{name}": length
        for path in sorted(package.glob("*.py"))
        for name, length in long_functions(path.read_text(), EQUILIBRIUM_MAX_LINES)
    }
    assert not long, long


def test_the_length_rule_finds_a_long_function() -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(EQUILIBRIUM_MAX_LINES))
    assert long_functions(f"def f():\n{body}", EQUILIBRIUM_MAX_LINES) == [("f", 51)]
    assert long_functions("def g():\n    pass\n", EQUILIBRIUM_MAX_LINES) == []
