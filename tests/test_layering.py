"""The package's imports go one way, as docs/architecture.md states: cli over app over train and report over config
over the rest; only cli, app and config talk to Hydra; and no two modules import each other, directly or around a
circle. Read from the source (every import, function-level ones included), so an import that would close a circle
is caught even where Python would let it pass at run time."""
import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "cl_bench"
# Top to bottom; a module may import only from its own layer's package or from layers below it.
LAYERS = [{"__main__", "cli", "api"}, {"app"}, {"train", "report"}, {"config"}]
HYDRA_USERS = {"cli", "app", "config"}


def top(module: str) -> str:
    """The part of cl_bench a module belongs to: its top-level module or sub-package."""
    return module.split(".")[1] if "." in module else ""


def layer(part: str) -> int:
    return next((i for i, parts in enumerate(LAYERS) if part in parts), len(LAYERS))


def imports() -> dict[str, set[str]]:
    """Each module of cl_bench (dotted) and the cl_bench modules and third-party roots it imports."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ["cl_bench", *path.relative_to(PACKAGE).with_suffix("").parts]
        package = parts[:-1] if parts[-1] != "__init__" else parts[:-1]
        name = ".".join(parts if parts[-1] != "__init__" else parts[:-1])
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package[: len(package) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
                targets |= {f"{prefix}.{alias.name}" for alias in node.names} if not node.module else {prefix}
            elif isinstance(node, ast.ImportFrom):
                targets.add(node.module)
            elif isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
        found[name] = targets
    return found


def own(targets: set[str], modules: set[str]) -> set[str]:
    """The cl_bench modules among import targets (a `from pkg import name` names a module or a name in pkg)."""
    return {t if t in modules else t.rsplit(".", 1)[0] for t in targets if t.startswith("cl_bench.")} & modules


def test_every_import_goes_down_the_layers():
    found = imports()
    modules = set(found)
    upward = [f"{m} imports {t}" for m, targets in found.items() for t in own(targets, modules)
              if top(t) != top(m) and layer(top(t)) < layer(top(m))]
    assert upward == []


def test_only_the_command_line_the_application_and_the_config_import_hydra():
    found = imports()
    users = sorted(m for m, targets in found.items() if any(t.split(".")[0] == "hydra" for t in targets))
    assert {top(m) for m in users} <= HYDRA_USERS, users


def test_no_import_circle_between_the_parts_of_the_package():
    found = imports()
    modules = set(found)
    graph: dict[str, set[str]] = {}
    for m, targets in found.items():
        if top(m):
            graph.setdefault(top(m), set()).update(top(t) for t in own(targets, modules) if top(t) not in ("", top(m)))
    circles = []

    def visit(node, path):
        for nxt in graph.get(node, ()):
            if nxt in path:
                circles.append(" -> ".join(path[path.index(nxt):] + [nxt]))
            elif len(path) < len(graph):
                visit(nxt, path + [nxt])
    for start in sorted(graph):
        visit(start, [start])
    assert circles == []


def test_no_method_file_imports_another_method_file():
    """A method's file imports the shared modules of methods/ (base, loop, memory, online, masking, ...), never
    another method's file: what two methods share lives in a shared module."""
    from cl_bench.methods import METHODS

    found = imports()
    method_files = {cls.__module__ for cls in METHODS.values()}
    crossing = [f"{m} imports {t}" for m in sorted(method_files) for t in sorted(own(found[m], set(found)))
                if t in method_files and t != m]
    assert crossing == []


def test_no_function_of_the_package_runs_over_fifty_lines():
    """Short functions (issue 32): a longer one is split where its steps are."""
    long = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno >= 50:
                long.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name}")
    assert long == []


def test_the_method_contract_stays_short():
    """methods/base.py holds the contract a method author reads (issue 32): under 250 lines, the loop, the heads,
    the context and data-parallel training live beside it."""
    assert len((PACKAGE / "methods" / "base.py").read_text().splitlines()) < 250
