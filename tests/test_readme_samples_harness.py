"""The sample-level harness example of docs/testing.md runs as written, and
the harness it calls catches a bug seeded into it."""

from __future__ import annotations

from typing import Any

import pytest

from ._docs import filename, python_blocks, section

PAGE = "testing.md"
MARKER = "run_sample_integration_test(BareSampleLedger)"
SECTION = "Test your own integration: `frontier_core.testing`"

pytest.importorskip("hypothesis")


def example() -> str:
    (block,) = [b for b in python_blocks(PAGE) if MARKER in b]
    return str(block)


def test_the_example_sits_in_the_integration_section_after_the_prompt_level_one() -> None:
    text = section(PAGE, SECTION)
    assert example() in text
    assert text.index("run_integration_test(BareLedger)") < text.index(MARKER)


def test_the_example_runs_as_written() -> None:
    exec(compile(example(), filename(PAGE), "exec"), {"__name__": "readme_sample_harness"})


def test_the_example_wiring_losing_its_held_samples_is_caught() -> None:
    """The example's harness is not a formality: the same wiring, resumed
    without the samples of the siblings it tells the ledger it holds,
    trains a group without one of them."""
    from hypothesis import Phase, settings

    from frontier_core.testing import DEFAULT_SETTINGS, CoverageViolation

    body = example().replace(MARKER, "")
    namespace: dict[str, Any] = {"__name__": "readme_sample_harness"}
    exec(compile(body, filename(PAGE), "exec"), namespace)

    class LosesTheHeldSamples(namespace["BareSampleLedger"]):  # type: ignore[misc, name-defined]
        def resume(self, saved: object) -> object:
            restored = super().resume(saved)
            self.store = {}
            return restored

    with pytest.raises(CoverageViolation) as info:
        namespace["run_sample_integration_test"](
            LosesTheHeldSamples,
            settings=settings(
                DEFAULT_SETTINGS, database=None, phases=[Phase.generate], derandomize=True
            ),
        )
    assert info.value.invariant == "SAMPLE-EXACTLY-ONCE"
