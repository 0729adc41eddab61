"""The import rule of ARCHITECTURE.md, enforced from the code's imports.

Every ``import`` and ``from ... import`` in ``src/`` (lazy ones inside
functions included) is resolved to an absolute module name and checked
against the table: the core imports no adapter, a binding imports neither
another binding nor the examples, the verification rig or the benchmarks,
the adapters' root imports no binding (its command module excepted), the
checkpoint protocol (``frontier_adapters.checkpoints``) imports only the
core, the root's errors, the store, the standard library and attrs, the
store (``frontier_adapters.store``) only the core, the root's errors, the
standard library and attrs (and ``obstore``, lazily, in its object-store
module), the examples import public names only (no module or name with a
component that starts with ``_``, ours or a framework's, and nothing of the
rig or the benchmarks), and each framework stays in the binding that owns
it.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {
    "frontier_core": ROOT / "src" / "frontier_core",
    "frontier_adapters": ROOT / "src" / "adapters",
}
BINDINGS = ("torch", "rollout", "ray", "trl", "agents")
#: The layerings between bindings: a TRL trainer is a torch trainer, so
#: the trl binding builds on the torch binding's seekable sampler; an
#: episode is driven over the rollout binding's engine contract.
BUILDS_ON = {"trl": {"torch"}, "agents": {"rollout"}}
#: The framework-free checkpoint protocol: a root-level package that the root
#: modules and every binding may import; it imports the core, these root
#: modules, the standard library and these packages, nothing else.
CHECKPOINTS = "checkpoints"
CHECKPOINTS_ROOT_IMPORTS = {"frontier_adapters._errors"}
CHECKPOINTS_PACKAGES = {"attrs"}
#: The storage seam: a root-level package that the root modules, the
#: checkpoint protocol and every binding may import; it imports the core,
#: these root modules, the standard library and attrs, and obstore only
#: inside functions of its object-store module.
STORE = "store"
STORE_ROOT_IMPORTS = {"frontier_adapters._errors"}
STORE_PACKAGES = {"attrs"}
STORE_OBSTORE_MODULE = "frontier_adapters.store._object"
#: framework -> the adapter packages allowed to import it
FRAMEWORKS = {
    "torch": {"torch", "trl", "examples", "verify", "bench"},
    "torchdata": {"torch", "trl", "examples", "verify", "bench"},
    "ray": {"ray", "examples", "verify", "bench"},
    "vllm": {"rollout", "examples", "verify", "bench"},
    "transformers": {"trl", "examples", "verify", "bench"},
    "trl": {"trl", "examples", "verify", "bench"},
    "accelerate": {"trl", "examples", "verify", "bench"},
    "datasets": {"trl", "examples", "verify", "bench"},
}


def module_name(path: Path) -> tuple[str, bool]:
    """The dotted name of a source file, and whether it is a package."""
    for name, base in PACKAGES.items():
        if base in path.parents or path.parent == base:
            parts = [name, *path.relative_to(base).with_suffix("").parts]
            if parts[-1] == "__init__":
                return ".".join(parts[:-1]), True
            return ".".join(parts), False
    raise AssertionError(path)


def imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, absolute module) for every import statement in ``path``."""
    name, is_package = module_name(path)
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                base = node.module or ""
            else:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            # ``from . import x`` may name a submodule: count it as one.
            yield node.lineno, base
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}"


def sources() -> list[Path]:
    return sorted(p for base in PACKAGES.values() for p in base.rglob("*.py"))


def area(module: str) -> str:
    """Where a module of ours lives: ``core``, ``core.testing``, ``root``,
    ``checkpoints``, ``store``, a binding's name, ``examples``, ``verify`` or
    ``bench``."""
    parts = module.split(".")
    if parts[0] == "frontier_core":
        return "core.testing" if parts[1:2] == ["testing"] else "core"
    if len(parts) > 1 and parts[1] in (
        *BINDINGS,
        CHECKPOINTS,
        STORE,
        "examples",
        "verify",
        "bench",
    ):
        return parts[1]
    return "root"


def private(module: str) -> bool:
    """Whether a dotted name (a module, or a module and a name imported from
    it) has a component that starts with ``_``; ``__future__`` excepted."""
    return module.split(".")[0] != "__future__" and any(
        part.startswith("_") for part in module.split(".")
    )


def existing(module: str) -> bool:
    """Whether a dotted name of ours is a module (not an attribute)."""
    top, *rest = module.split(".")
    base = PACKAGES[top].joinpath(*rest)
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def top_level_imports(path: Path) -> set[str]:
    """The modules ``path`` imports at module level (not inside a function)."""
    found: set[str] = set()
    for node in ast.parse(path.read_text(), str(path)).body:
        for sub in ast.walk(node) if not isinstance(node, ast.FunctionDef | ast.ClassDef) else ():
            if isinstance(sub, ast.Import):
                found.update(alias.name for alias in sub.names)
            elif isinstance(sub, ast.ImportFrom) and sub.level == 0 and sub.module:
                found.add(sub.module)
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.Import | ast.ImportFrom):
                    found.add("(a class-level import)")
    return found


def violations() -> list[str]:
    found = []
    for path in sources():
        me, _ = module_name(path)
        mine = area(me)
        where = path.relative_to(ROOT)
        if mine == STORE and any(t.split(".")[0] == "obstore" for t in top_level_imports(path)):
            found.append(f"{where}: {me} imports obstore at module level, not lazily")
        for line, target in imports(path):
            top = target.split(".")[0]
            if mine == "examples" and private(target):
                found.append(f"{where}:{line}: the examples import a private name ({target})")
            if top in PACKAGES:
                if not existing(target):
                    continue  # an attribute imported from a module, checked as its module
                theirs = area(target)
                if mine in ("core", "core.testing") and theirs not in ("core", "core.testing"):
                    found.append(f"{where}:{line}: the core imports {target}")
                elif mine == "core" and theirs == "core.testing":
                    found.append(f"{where}:{line}: the core imports its testing tools ({target})")
                elif mine == CHECKPOINTS and theirs not in ("core", CHECKPOINTS, STORE):
                    if target not in CHECKPOINTS_ROOT_IMPORTS:
                        found.append(f"{where}:{line}: the checkpoints package imports {target}")
                elif mine == STORE and theirs not in ("core", STORE):
                    if target not in STORE_ROOT_IMPORTS:
                        found.append(f"{where}:{line}: the store package imports {target}")
                elif mine == "root" and theirs not in ("core", "root", CHECKPOINTS, STORE):
                    if me != "frontier_adapters._cli":
                        found.append(f"{where}:{line}: the adapters' root imports {target}")
                elif mine == "examples" and theirs in ("verify", "bench"):
                    found.append(f"{where}:{line}: the examples import the rig or bench ({target})")
                elif mine in BINDINGS and theirs not in (
                    "core",
                    "root",
                    CHECKPOINTS,
                    STORE,
                    mine,
                    *BUILDS_ON.get(mine, ()),
                ):
                    found.append(f"{where}:{line}: the {mine} binding imports {target}")
            elif top in FRAMEWORKS and top not in sys.stdlib_module_names:
                if mine not in FRAMEWORKS[top]:
                    found.append(f"{where}:{line}: {me} ({mine}) imports {top}")
            elif mine == CHECKPOINTS and top not in sys.stdlib_module_names:
                if top not in CHECKPOINTS_PACKAGES:
                    found.append(f"{where}:{line}: {me} ({mine}) imports {top}")
            elif mine == STORE and top not in sys.stdlib_module_names:
                if top not in STORE_PACKAGES and not (
                    top == "obstore" and me == STORE_OBSTORE_MODULE
                ):
                    found.append(f"{where}:{line}: {me} ({mine}) imports {top}")
    return found


def test_the_code_keeps_the_import_rule() -> None:
    assert violations() == []


def test_the_checker_sees_lazy_and_relative_imports(tmp_path: Path) -> None:
    """The rule checker itself: a relative import two levels up and a lazy
    import inside a function both resolve to the absolute module."""
    path = PACKAGES["frontier_adapters"] / "ray" / "_fleet.py"
    found = {target for _, target in imports(path)}
    assert "frontier_adapters._service" in found
    assert "ray" in found
    assert area("frontier_adapters.examples.cpu_engine") == "examples"
    assert area("frontier_adapters.verify.demo") == "verify"
    assert not private("__future__.annotations")
    assert private("frontier_adapters.rollout._engine.STOP")
    assert private("frontier_adapters.rollout._x") and private("ray._private")
    assert area("frontier_adapters._collector") == "root"
    assert area("frontier_adapters.checkpoints._lineage") == "checkpoints"
    assert area("frontier_adapters.store._posix") == "store"
    torch_checkpoints = PACKAGES["frontier_adapters"] / "torch" / "_checkpoints.py"
    found = {target for _, target in imports(torch_checkpoints)}
    assert "frontier_adapters.checkpoints" in found
    assert area("frontier_core.testing._harness") == "core.testing"


@pytest.mark.parametrize(
    ("code", "where", "expected"),
    [
        (
            "from frontier_adapters import StreamCollector\n",
            "frontier_core/_x.py",
            "the core imports",
        ),
        ("from ..examples import grpo\n", "adapters/torch/_x.py", "the torch binding imports"),
        ("from ..verify import demo\n", "adapters/torch/_x.py", "the torch binding imports"),
        (
            "from ..rollout._engine import STOP\n",
            "adapters/examples/planted.py",
            "the examples import a private name",
        ),
        (
            "from ..rollout import _engine\n",
            "adapters/examples/planted.py",
            "the examples import a private name",
        ),
        (
            "def f():\n    from ray._private import services\n",
            "adapters/examples/planted.py",
            "the examples import a private name",
        ),
        (
            "from .cpu_engine import _sample\n",
            "adapters/examples/planted.py",
            "the examples import a private name",
        ),
        (
            "from ..verify.demo import run_demo\n",
            "adapters/examples/planted.py",
            "the examples import the rig or bench",
        ),
        ("from ..rollout import RolloutLoop\n", "adapters/ray/_x.py", "the ray binding imports"),
        ("def f():\n    import torch\n", "adapters/rollout/_x.py", "imports torch"),
        ("from .torch import SeekableSource\n", "adapters/_x.py", "the adapters' root imports"),
        ("def f():\n    import torch\n", "adapters/checkpoints/_x.py", "imports torch"),
        ("import numpy\n", "adapters/checkpoints/_x.py", "imports numpy"),
        (
            "from .._collector import StreamCollector\n",
            "adapters/checkpoints/_x.py",
            "the checkpoints package imports",
        ),
        ("from ..torch import TENSOR_PARTS\n", "adapters/checkpoints/_x.py", "imports"),
        ("import obstore\n", "adapters/store/_object.py", "not lazily"),
        ("def f():\n    import obstore\n", "adapters/store/_x.py", "imports obstore"),
        ("import numpy\n", "adapters/store/_x.py", "imports numpy"),
        ("from ..checkpoints import X\n", "adapters/store/_x.py", "the store package imports"),
        ("from .._collector import X\n", "adapters/store/_x.py", "the store package imports"),
    ],
)
def test_a_planted_violation_is_caught(
    code: str, where: str, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    planted = ROOT / "src" / where
    real_sources = sources()
    real_read = Path.read_text

    def read_text(self: Path, *args: object, **kwargs: object) -> str:
        return code if self == planted else real_read(self)

    monkeypatch.setattr(Path, "read_text", read_text)
    monkeypatch.setitem(globals(), "sources", lambda: [*real_sources, planted])
    assert any(expected in v for v in violations()), violations()


def test_an_example_of_public_names_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The examples' rule flags private names only: ``__future__``, public
    modules and names of ours and of a framework pass."""
    planted = ROOT / "src" / "adapters" / "examples" / "planted.py"
    code = (
        "from __future__ import annotations\n"
        "import torch.nn.functional as F\n"
        "from frontier_core import LedgerConfig\n"
        "from ..rollout import STOP, RolloutLoop\n"
        "from .cpu_engine import CpuEngine\n"
    )
    real_sources = sources()
    real_read = Path.read_text

    def read_text(self: Path, *args: object, **kwargs: object) -> str:
        return code if self == planted else real_read(self)

    monkeypatch.setattr(Path, "read_text", read_text)
    monkeypatch.setitem(globals(), "sources", lambda: [*real_sources, planted])
    assert violations() == []


def test_architecture_md_names_every_package_directory() -> None:
    doc = (ROOT / "ARCHITECTURE.md").read_text()
    for base in PACKAGES.values():
        for init in base.rglob("__init__.py"):
            rel = init.parent.relative_to(base)
            if rel.parts:
                assert f"{rel.parts[-1]}/" in doc, f"ARCHITECTURE.md does not name {rel}"
