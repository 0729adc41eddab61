"""Packaging: the import names, the wheel, the light core, the public surface."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import tomllib

import frontier_core

ROOT = Path(__file__).resolve().parent.parent


def run_python(code: str, **env: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **env},
    )
    return proc.stdout


def test_importing_the_core_loads_no_heavy_or_async_module() -> None:
    out = run_python(
        "import sys, frontier_core, frontier_adapters\n"
        "heavy = {'torch', 'numpy', 'vllm', 'asyncio', 'torchdata', 'tqdm', 'ray', 'matplotlib'}\n"
        "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}))"
    )
    assert out.strip() == "[]"


def test_the_core_imports_only_the_stdlib_and_attrs() -> None:
    """Every import statement in src/frontier_core names the stdlib, attrs
    or the package itself (the CLI's lazy imports of tqdm and matplotlib are
    inside functions and allowed by name)."""
    import ast

    allowed_lazy = {"tqdm", "matplotlib", "frontier_adapters"}
    stdlib = sys.stdlib_module_names
    # frontier_core.testing is for test suites (the harness is a Hypothesis
    # state machine): it may import hypothesis, the `testing` extra. Nothing
    # imports it from the core (test_the_core_does_not_load_the_testing_tools).
    testing = ROOT / "src" / "frontier_core" / "testing"
    for path in (ROOT / "src" / "frontier_core").rglob("*.py"):
        extra = {"hypothesis"} if testing in path.parents else set()
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                ok = top in stdlib or top in {"attrs", "frontier_core", *extra}
                ok = ok or (top in allowed_lazy and node.col_offset > 0)
                assert ok, f"{path.relative_to(ROOT)}:{node.lineno} imports {name}"


def test_the_core_does_not_load_the_testing_tools() -> None:
    """``import frontier_core`` must work without hypothesis installed."""
    out = run_python(
        "import sys, frontier_core\n"
        "print(sorted(m for m in sys.modules if m.startswith(('hypothesis', "
        "'frontier_core.testing'))))"
    )
    assert out.strip() == "[]"


def test_public_surface_is_what_all_says() -> None:
    """In a fresh interpreter (other tests import subpackages, which then
    show up as attributes), the package exposes exactly ``__all__``."""
    out = run_python(
        "import frontier_core\n"
        "print(sorted(n for n in dir(frontier_core) if not n.startswith('_')))"
    )
    exported = set(eval(out))
    assert exported == set(frontier_core.__all__)
    for name in frontier_core.__all__:
        obj = getattr(frontier_core, name)
        if isinstance(obj, type) or (callable(obj) and hasattr(obj, "__code__")):
            assert obj.__module__.startswith("frontier_core."), name


def test_pyproject_lists_every_package_directory() -> None:
    """The package list is hand-kept because src/adapters installs as
    frontier_adapters: a new subpackage must be listed or the wheel lacks it."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping = {Path(v): k for k, v in config["package-dir"].items()}
    found = set()
    for init in (ROOT / "src").rglob("__init__.py"):
        rel = init.parent.relative_to(ROOT)
        for base, name in mapping.items():
            if rel == base or base in rel.parents:
                found.add(".".join([name, *rel.relative_to(base).parts]))
    assert found == set(config["packages"])


def test_editable_install_maps_the_adapters_directory() -> None:
    import importlib.util

    import frontier_adapters

    assert Path(frontier_adapters.__file__).parent.name in {"adapters", "frontier_adapters"}
    # The project never exposes the bare name that AdapterHub owns.
    assert importlib.util.find_spec("adapters") is None


def test_wheel_installs_under_the_namespaced_names(tmp_path: Path) -> None:
    """Build a real wheel, install it into a fresh target directory and
    import from there: no bare ``adapters`` package, typed markers shipped."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("frontier_core-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "frontier_core/py.typed" in names
    assert "frontier_adapters/py.typed" in names
    assert "frontier_adapters/__init__.py" in names
    assert not any(n.startswith("adapters/") for n in names)
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert (
        "frontier = frontier_core._cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
    )

    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    out = run_python(
        "import frontier_core, frontier_adapters, importlib.util\n"
        "print(frontier_core.__file__); print(frontier_adapters.__file__)\n"
        "print(importlib.util.find_spec('adapters'))",
        PYTHONPATH=str(target),
        PYTHONNOUSERSITE="1",
    )
    core_file, adapters_file, bare = out.splitlines()
    assert core_file.startswith(str(target))
    assert adapters_file.startswith(str(target))
    assert bare == "None"
