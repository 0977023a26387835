"""The layout the architecture relies on, beside the package rules import-linter checks in `make lint`
(pyproject.toml's [tool.importlinter]: the deployables' packages never import each other nor the development
side): the images install no development code, tensorkiln's subpackages import each other without cycles, and
importing the operator's modules registers nothing and connects to nothing."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
OPERATOR = REPO / "operator" / "tensorkiln"


def modules(package: str, root: Path) -> dict[str, Path]:
    found = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        found[".".join((package, *parts)).removesuffix(".__init__")] = path
    return found


def imported(path: Path) -> set[str]:
    """Every module name an import in `path` names, at any depth (lazy imports count too)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


@pytest.mark.parametrize("dockerfile", ["operator/Dockerfile", "compiler-jobs/Dockerfile"])
def test_images_install_neither_the_local_cluster_nor_the_local_node(dockerfile):
    text = (REPO / dockerfile).read_text()
    assert "localcluster" not in text and "tensorkiln_local" not in text


def package_of(module: str) -> str:
    """tensorkiln.controllers.handlers -> tensorkiln.controllers; top-level modules stand alone."""
    return ".".join(module.split(".")[:2])


def test_tensorkiln_packages_import_each_other_without_cycles():
    graph: dict[str, set[str]] = {}
    for name, path in modules("tensorkiln", OPERATOR).items():
        for target in imported(path):
            if target.split(".")[0] == "tensorkiln" and package_of(target) != package_of(name):
                graph.setdefault(package_of(name), set()).add(package_of(target))

    def cycle_from(start: str, path: list[str]) -> list[str] | None:
        for nxt in sorted(graph.get(path[-1], ())):
            if nxt == start:
                return [*path, start]
            if nxt not in path and (found := cycle_from(start, [*path, nxt])):
                return found
        return None

    cycles = [c for p in sorted(graph) if (c := cycle_from(p, [p]))]
    assert cycles == []


def test_importing_the_handlers_registers_nothing_and_reads_no_environment():
    """The runner builds the context and registers the handlers into its own kopf registry."""
    probe = (
        "import os, kopf\n"
        "os.environ['TENSORKILN_RESYNC_SECONDS'] = 'not a number'\n"  # read at import: ValueError
        "os.environ['KUBECONFIG'] = '/nonexistent'\n"
        "from tensorkiln.controllers import handlers\n"
        "from tensorkiln.admission import webhook\n"
        "default = kopf.get_default_registry()\n"  # kopf's own fallback logins aside
        "registries = [default._spawning, default._changing, default._activities, default._webhooks]\n"
        "print(sorted(h.id for r in registries for h in r.get_all_handlers() if h.fn.__module__.startswith('tensorkiln')))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
