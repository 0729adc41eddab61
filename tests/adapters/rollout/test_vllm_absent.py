"""Where vLLM is absent (the project's own venv): what the vLLM routes say.

``frontier demo --engine vllm`` and ``frontier bench --only vllm`` are
refused with the install line; the real-vLLM test modules skip, and fail
instead under ``FRONTIER_REQUIRE_VLLM=1`` (what ``scripts/test.sh`` sets in
``.venv-vllm``), so CI cannot pass by skipping them."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from frontier_core import _cli

if importlib.util.find_spec("vllm") is not None:
    pytest.skip("vllm is installed here: see test_vllm.py", allow_module_level=True)

HERE = Path(__file__).resolve().parent


def test_frontier_demo_engine_vllm_names_the_install(capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli.main(["demo", "--engine", "vllm", "--quick"]) == 2
    err = capsys.readouterr().err
    assert "scripts/setup-vllm.sh" in err and ".venv-vllm/bin/frontier demo --engine vllm" in err


def test_frontier_bench_only_vllm_is_refused_with_both_routes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _cli.main(["bench", "--quick", "--only", "vllm"]) == 2
    err = capsys.readouterr().err
    assert "frontier bench --only vllm needs the vllm extra" in err
    assert "pip install 'frontier-core[vllm]' on a GPU" in err
    assert "bash scripts/setup-vllm.sh" in err


@pytest.mark.parametrize("required", [False, True])
def test_the_real_vllm_tests_skip_or_fail_without_vllm(required: bool) -> None:
    env = {"PATH": "/usr/bin:/bin", "FRONTIER_REQUIRE_VLLM": "1" if required else "0"}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
         str(HERE / "test_vllm.py"), str(HERE / "test_vllm_kill.py"),
         str(HERE / "test_vllm_samples.py")],
        capture_output=True, text=True, env=env, cwd=HERE.parents[2], timeout=300,
    )  # fmt: skip
    if required:
        assert out.returncode != 0
        assert "FRONTIER_REQUIRE_VLLM=1 but vllm is not installed" in out.stdout
    else:
        assert out.returncode in (0, 5), out.stdout  # 5: every module skipped
        assert "3 skipped" in out.stdout and "scripts/setup-vllm.sh" in out.stdout
