"""Import hygiene of gnnsys, samplers, partition and common.

1. `common`, `samplers` and `partition` (every submodule) import without torch and
   without gnnsys: they know arrays and files, not trainers.
2. No module imports a private (`_`-prefixed) module of another package.
3. No import cycle among the modules of the four packages.

2 and 3 read the sources with `ast` (nothing is imported), counting imports at module
level and inside functions; `if TYPE_CHECKING:` blocks do not count. The graph is over
modules: `import a.b.c` depends on module a.b.c, not on a.b's __init__.
"""
from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("gnnsys", "samplers", "partition", "common")
ARRAY_ONLY = ("common", "samplers", "partition")
# Missing these only means "no GPU stack here": such a module is skipped, not failed.
GPU_LIBRARIES = ("numba.cuda", "numba_cuda", "cupy")

ARRAY_ONLY_IMPORT = r"""
import importlib, json, pkgutil, sys
def forbidden_loaded():
    return sorted({m.split(".")[0] for m in sys.modules} & {"torch", "gnnsys"})
first_offender = None
for name in ARRAY_ONLY:
    package = importlib.import_module(name)
    first_offender = first_offender or (forbidden_loaded() and name)
    for info in pkgutil.walk_packages(package.__path__, name + "."):
        try:
            importlib.import_module(info.name)
        except ModuleNotFoundError as err:
            if not (err.name or "").startswith(GPU_LIBRARIES):
                raise
        first_offender = first_offender or (forbidden_loaded() and info.name)
print(json.dumps({"loaded": sorted(sys.modules), "forbidden": forbidden_loaded(),
                  "first_offender": first_offender}))
"""


def test_array_only_packages_import_without_torch_or_gnnsys():
    script = f"GPU_LIBRARIES = {GPU_LIBRARIES!r}\nARRAY_ONLY = {ARRAY_ONLY!r}\n" + ARRAY_ONLY_IMPORT
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, f"importing {'/'.join(ARRAY_ONLY)} failed:\n{done.stderr}"
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert {"samplers.fused_cpu", "partition.build", "common.files",
            "common.rng"} <= set(report["loaded"])
    assert not report["forbidden"], (
        f"{'/'.join(ARRAY_ONLY)} must not load {report['forbidden']}; first loaded by "
        f"importing {report['first_offender']}")


# ----------------------------------------------------------------------------- ast scan
def module_files() -> dict[str, Path]:
    """Dotted module name -> source file, for every .py file of the packages."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def is_type_checking_guard(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def import_nodes(tree: ast.AST):
    """Every Import/ImportFrom in the tree, at any depth, outside `if TYPE_CHECKING:`."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If) and is_type_checking_guard(node):
            stack.extend(node.orelse)
        else:
            stack.extend(ast.iter_child_nodes(node))


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of `known` that module `name` (source at `path`) imports."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in import_nodes(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            # `from pkg import name`: the submodule pkg.name if there is one, else pkg.
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                       for alias in node.names]
        found.update(t for t in targets if t in known and t != name)
    return found


def import_graph() -> dict[str, set[str]]:
    files = module_files()
    known = set(files)
    return {name: imported_modules(name, path, known) for name, path in files.items()}


def package_of(module: str, modules: dict) -> str:
    """A package is itself; a plain module belongs to its parent package."""
    is_package = module in modules and modules[module].name == "__init__.py"
    return module if is_package else module.rpartition(".")[0]


def private_part(module: str) -> tuple[str, str] | None:
    """(owning package, private module or package) for a module under a `_x` part."""
    parts = module.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:i]), ".".join(parts[:i + 1])
    return None


def cross_package_private_imports(graph: dict[str, set[str]], modules: dict) -> list[str]:
    """Imports of a private module by a module outside its package (or the private part)."""
    bad = []
    for importer, targets in sorted(graph.items()):
        for target in sorted(targets):
            private = private_part(target)
            if private is None:
                continue
            owner, private_root = private
            inside_private = (importer + ".").startswith(private_root + ".")
            if package_of(importer, modules) != owner and not inside_private:
                bad.append(f"{importer} imports {target} (private to {owner})")
    return bad


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path [a, b, ..., a], or None (iterative depth-first search)."""
    state = {}                          # module -> "open" while on the path, "done" after
    for start in sorted(graph):
        if start in state:
            continue
        path, iters = [start], [iter(sorted(graph[start]))]
        state[start] = "open"
        while path:
            nxt = next(iters[-1], None)
            if nxt is None:
                state[path.pop()] = "done"
                iters.pop()
            elif state.get(nxt) == "open":
                return path[path.index(nxt):] + [nxt]
            elif nxt not in state:
                state[nxt] = "open"
                path.append(nxt)
                iters.append(iter(sorted(graph[nxt])))
    return None


def test_no_cross_package_private_imports():
    modules = module_files()
    bad = cross_package_private_imports(import_graph(), modules)
    assert not bad, "import the other package's public name instead:\n" + "\n".join(bad)


def test_common_is_a_leaf():
    """`common` serves the other packages and imports none of them (samplers' sources it
    finds by path, for the kernel cache's stamp, without importing them)."""
    inward = [f"{importer} imports {target}"
              for importer, targets in sorted(import_graph().items())
              if importer.split(".")[0] == "common"
              for target in sorted(targets) if target.split(".")[0] != "common"]
    assert not inward, "common must not import the packages it serves:\n" + "\n".join(inward)


def test_no_import_cycles():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


# ----------------------------------------------------------------------------- the checkers
@pytest.mark.parametrize("graph, cycle", [
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
    ({"a": {"b"}, "b": set(), "c": {"a", "b"}}, None),
])
def test_find_cycle_reports_the_path(graph, cycle):
    assert find_cycle(graph) == cycle


def test_private_import_rule():
    modules = {"p": Path("p/__init__.py"), "p.sub": Path("p/sub/__init__.py"),
               "p._x": Path("p/_x.py"), "p.y": Path("p/y.py"), "p.sub.z": Path("p/sub/z.py"),
               "q.w": Path("q/w.py")}
    graph = {"p.y": {"p._x"}, "p": {"p._x"}, "p.sub.z": {"p._x"}, "q.w": {"p._x"}}
    assert cross_package_private_imports(graph, modules) == [
        "p.sub.z imports p._x (private to p)", "q.w imports p._x (private to p)"]


def test_imports_are_resolved_like_python(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("from typing import TYPE_CHECKING\n"
                      "from . import sib\nfrom .. import top, name\n"
                      "import pkg.deep.leaf\n"
                      "if TYPE_CHECKING:\n    import pkg.hidden\n"
                      "def lazy():\n    from pkg.deep import leaf2\n")
    known = {"pkg", "pkg.deep", "pkg.deep.m", "pkg.deep.sib", "pkg.top", "pkg.deep.leaf",
             "pkg.deep.leaf2", "pkg.hidden"}
    assert imported_modules("pkg.deep.m", source, known) == {
        "pkg.deep.sib", "pkg.top", "pkg", "pkg.deep.leaf", "pkg.deep.leaf2"}


# ----------------------------------------------------------------------------- mode seams
MODE_PACKAGES = ("gnnsys.minibatch", "gnnsys.temporal", "gnnsys.fullgraph", "gnnsys.link")

LOADED_MODES = r"""
import json, sys
{statement}
print(json.dumps(sorted(m for m in sys.modules
                        if any(m == p or m.startswith(p + ".") for p in {packages!r}))))
"""


def loaded_mode_packages(statement: str) -> list[str]:
    script = LOADED_MODES.format(statement=statement, packages=MODE_PACKAGES)
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_config_imports_no_mode_package():
    """The config's schema and vocabularies are read without a mode's package (numba
    kernels, torch models): only validating a config loads its own mode's plug-in."""
    assert loaded_mode_packages("import gnnsys.config") == []
    checked = loaded_mode_packages("from gnnsys.config import from_dict\nfrom_dict({})")
    assert checked and all(m.startswith("gnnsys.minibatch") for m in checked), checked


# A task (node | link) is not a data kind (static | temporal): "is this temporal?" asks
# the kind (`Mode.data_kind`, `graph.kind`, a registry entry's `kind`), never the older
# task name or the graph's attributes. Reading an older name is LEGACY_TASKS' one line.
DECIDES_BY_TASK_NAME = re.compile(r"""["']link_prediction["']|hasattr\(\s*\w+\s*,\s*["']src["']""")


def test_only_the_temporal_package_decides_by_link_prediction_or_src():
    offenders = []
    for package in PACKAGES + ("scripts",):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.is_relative_to(ROOT / "gnnsys" / "temporal"):
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if DECIDES_BY_TASK_NAME.search(line) and \
                        not line.startswith("LEGACY_TASKS = "):
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "decide by the data kind instead:\n" + "\n".join(offenders)


# What a mode answers is a declared method of `Mode` (a default where a mode may not):
# never a name looked up on the mode by string.
LOOKS_UP_THE_MODE = re.compile(r"""\b(?:has|get)attr\(\s*(?:self\.)?mode\s*,""")


def test_no_mode_method_is_looked_up_by_name():
    offenders = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
                 for package in PACKAGES + ("scripts",)
                 for path in sorted((ROOT / package).rglob("*.py"))
                 for number, line in enumerate(path.read_text().splitlines(), 1)
                 if LOOKS_UP_THE_MODE.search(line)]
    assert not offenders, "declare the method on gnnsys.mode.Mode:\n" + "\n".join(offenders)
    assert LOOKS_UP_THE_MODE.search('getattr(mode, method)(*args)')
    assert LOOKS_UP_THE_MODE.search('hasattr(mode, "predict_rows")')


def test_the_task_name_rule_catches_what_it_names():
    assert DECIDES_BY_TASK_NAME.search('if task == "link_prediction":')
    assert DECIDES_BY_TASK_NAME.search("temporal = hasattr(graph, 'src')")
    assert not DECIDES_BY_TASK_NAME.search('if mode.data_kind == "temporal":')


# Outside a mode's own package, nothing branches on which mode or which model a config
# names: the mode class and the model registry say what differs (docs/CODEMAP.md, "Adding
# a mode, a model, a data kind"). `config.validate` checks the name exists, nothing more.
DECIDES_BY_MODE_OR_ARCH = re.compile(r"""\.(?:mode|arch)\s*(?:==|!=|in\s*\(|not\s+in\s*\()""")


def test_nothing_outside_the_modes_decides_by_a_mode_or_arch_name():
    offenders = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
                 for package in PACKAGES
                 for path in sorted((ROOT / package).rglob("*.py"))
                 if not any(path.is_relative_to(ROOT.joinpath(*m.split("."))) for m in MODE_PACKAGES)
                 for number, line in enumerate(path.read_text().splitlines(), 1)
                 if DECIDES_BY_MODE_OR_ARCH.search(line)]
    assert not offenders, "declare it on the mode or the model:\n" + "\n".join(offenders)
    assert DECIDES_BY_MODE_OR_ARCH.search('if config.mode != "minibatch" or m.residual:')
    assert DECIDES_BY_MODE_OR_ARCH.search('if config.model.arch in ("gcn", "sage"):')
    assert not DECIDES_BY_MODE_OR_ARCH.search("if cfg.mode not in MODES:")   # a known name
