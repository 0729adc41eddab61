"""Packaging: the import names, the wheel, the light core, the public surface."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
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
    inside functions and allowed by name; frontier_adapters is not)."""
    import ast

    allowed_lazy = {"tqdm", "matplotlib"}
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
    declared = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "frontier = frontier_core._cli:main" in declared
    assert "[frontier.commands]" in declared
    assert "demo = frontier_adapters._cli:demo [torch]" in declared
    assert "bench = frontier_adapters._cli:bench" in declared

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


# -- the `frontier` command: contributed subcommands ------------------------------------

PLUGIN_MODULE = """
class Hello:
    help = "say hello (a contributed test command)"

    def configure(self, parser):
        parser.add_argument("--name", default="world")

    def run(self, args):
        print(f"hello {args.name}")
        return 0


hello = Hello()
"""


def fake_plugin(tmp_path: Path, entry_points: str, *metadata: str) -> dict[str, str]:
    """A distribution ``fake-frontier-plugin`` on a fresh path entry that
    contributes ``entry_points`` (lines of ``name = module:attr [extras]``)
    to ``frontier.commands``; the environment that puts it on sys.path."""
    site = tmp_path / "site"
    info = site / "fake_frontier_plugin-1.0.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", "Name: fake-frontier-plugin", "Version: 1.0", *metadata]
    (info / "METADATA").write_text("\n".join(lines) + "\n")
    (info / "entry_points.txt").write_text(f"[frontier.commands]\n{entry_points}\n")
    (site / "fake_frontier_cmd.py").write_text(PLUGIN_MODULE)
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), *sys.path])}


def frontier(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "frontier_core._cli", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


def test_a_contributed_command_is_listed_and_runs(tmp_path: Path) -> None:
    env = fake_plugin(tmp_path, "hello = fake_frontier_cmd:hello")
    listing = frontier(env, "--help")
    assert listing.returncode == 0, listing.stderr
    assert "say hello (a contributed test command)" in listing.stdout
    # The adapters' own commands come through the same entry-point group.
    assert "demo" in listing.stdout and "bench" in listing.stdout
    ran = frontier(env, "hello", "--name", "entry points")
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, "hello entry points\n", "")


def test_a_command_whose_extra_is_missing_is_refused_in_one_line(tmp_path: Path) -> None:
    env = fake_plugin(
        tmp_path,
        "needy = fake_frontier_cmd:hello [gpu]\nheavy = no_such_module_for_frontier:cmd [gpu]",
        "Provides-Extra: gpu",
        'Requires-Dist: no-such-distribution-for-frontier>=1; extra == "gpu"',
    )
    line = "needs the gpu extra: pip install 'fake-frontier-plugin[gpu]'\n"
    # Importable, but its extra is not installed: refused before it runs.
    needy = frontier(env, "needy", "--name", "x")
    assert (needy.returncode, needy.stdout, needy.stderr) == (2, "", f"frontier needy {line}")
    # Not even importable without its extra: the same line, no traceback.
    heavy = frontier(env, "heavy")
    assert (heavy.returncode, heavy.stdout, heavy.stderr) == (2, "", f"frontier heavy {line}")
    listing = frontier(env, "--help")
    assert listing.returncode == 0 and "(needs the gpu extra)" in listing.stdout


def test_a_broken_command_is_refused_in_one_line(tmp_path: Path) -> None:
    env = fake_plugin(
        tmp_path, "broken = no_such_module_for_frontier:cmd\nodd = fake_frontier_cmd:Hello.help"
    )
    broken = frontier(env, "broken", "--anything")
    assert broken.returncode == 2 and broken.stdout == ""
    assert broken.stderr.count("\n") == 1 and "Traceback" not in broken.stderr
    assert broken.stderr.startswith("frontier broken: cannot load no_such_module_for_frontier:cmd")
    assert "No module named 'no_such_module_for_frontier'" in broken.stderr
    odd = frontier(env, "odd")
    assert odd.returncode == 2 and "is not a command" in odd.stderr
    assert odd.stderr.count("\n") == 1
    # The listing survives a broken plugin, and the core's commands too.
    listing = frontier(env, "--help")
    assert listing.returncode == 0 and "unavailable" in listing.stdout
    assert frontier(env, "audit", "--help").returncode == 0


def test_a_contributed_command_cannot_shadow_a_builtin(tmp_path: Path) -> None:
    env = fake_plugin(tmp_path, "audit = fake_frontier_cmd:hello")
    shown = frontier(env, "audit", "--help")
    assert shown.returncode == 0 and "--stream-len" in shown.stdout


def test_demo_without_torch_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The real entry point of ``frontier demo`` declares ``[torch]``: with
    torch's distribution absent it is refused in one line."""
    from importlib import metadata

    from frontier_core import _cli

    real = metadata.distribution

    def distribution(name: str) -> metadata.Distribution:
        if name in ("torch", "torchdata"):
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(_cli, "distribution", distribution)
    assert _cli.main(["demo", "--quick"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == "frontier demo needs the torch extra: pip install 'frontier-core[torch]'\n"


def test_the_core_commands_do_not_scan_for_plugins(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from frontier_core import _cli

    def refuse(**kwargs: object) -> object:
        raise AssertionError("entry points scanned for a core command")

    monkeypatch.setattr(_cli, "entry_points", refuse)
    log = tmp_path / "log.jsonl"
    log.write_text('{"step": 0, "ordinals": [0]}\n')
    assert _cli.main(["audit", str(log), "--stream-len", "1", "--json"]) == 0


def test_listing_the_commands_imports_no_framework() -> None:
    """``frontier --help`` loads every contributed command for its help
    line: that must not import torch, ray or any other framework."""
    out = run_python(
        "import sys\n"
        "from frontier_core._cli import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = {'torch', 'torchdata', 'ray', 'vllm', 'matplotlib', 'numpy'}\n"
        "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}))\n"
    )
    *listing, loaded = out.strip().splitlines()
    assert "demo" in "\n".join(listing) and "bench" in "\n".join(listing)
    assert loaded == "[]"


def test_the_core_cli_names_no_adapter() -> None:
    """Static: ``frontier_core/_cli.py`` (and the rest of the core) neither
    imports ``frontier_adapters`` nor names it in code (an
    ``importlib.import_module("frontier_adapters...")`` would); docstrings
    may mention it."""
    import ast

    for path in sorted((ROOT / "src" / "frontier_core").rglob("*.py")):
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("frontier_adapters") for a in node.names), where
            elif isinstance(node, ast.ImportFrom):
                assert not (node.module or "").startswith("frontier_adapters"), where
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                if id(node) not in docstrings:
                    assert "frontier_adapters" not in node.value, where


def test_pyproject_registers_the_adapters_commands() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    commands = config["entry-points"]["frontier.commands"]
    assert commands == {
        "demo": "frontier_adapters._cli:demo [torch]",
        "bench": "frontier_adapters._cli:bench",
    }
    assert config["scripts"] == {"frontier": "frontier_core._cli:main"}
