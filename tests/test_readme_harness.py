"""docs/testing.md's two examples of the integration harness, whole groups
and sibling by sibling, run as written; the first stays under 30 lines,
and the harness the second calls catches a bug seeded into it."""

from __future__ import annotations

from typing import Any

import pytest

from ._docs import filename, python_blocks, section

PAGE = "testing.md"
WHOLE = "run_integration_test(BareLedger)"
MARKER = "run_integration_test(BareSampleLedger)"
SECTION = "Test your own integration: `frontier_core.testing`"

pytest.importorskip("hypothesis")


def example(marker: str = MARKER) -> str:
    (block,) = [b for b in python_blocks(PAGE) if marker in b]
    return str(block)


def test_the_whole_group_example_runs_and_stays_under_30_lines() -> None:
    block = example(WHOLE)
    assert len([line for line in block.splitlines() if line.strip()]) <= 30
    exec(compile(block, filename(PAGE), "exec"), {"__name__": "readme_harness"})


def test_the_examples_sit_in_the_integration_section_whole_groups_first() -> None:
    text = section(PAGE, SECTION)
    assert example(WHOLE) in text and example() in text
    assert text.index(WHOLE) < text.index(MARKER)


def test_the_sibling_example_runs_as_written() -> None:
    exec(compile(example(), filename(PAGE), "exec"), {"__name__": "readme_harness_siblings"})


def test_the_sibling_example_wiring_losing_its_held_samples_is_caught() -> None:
    """The example's harness is not a formality: the same wiring, resumed
    without the samples of the siblings it tells the ledger it holds,
    trains a group without one of them."""
    from hypothesis import Phase, settings

    from frontier_core.testing import DEFAULT_SETTINGS, CoverageViolation

    body = example().replace(MARKER, "")
    namespace: dict[str, Any] = {"__name__": "readme_harness_siblings"}
    exec(compile(body, filename(PAGE), "exec"), namespace)

    class LosesTheHeldSamples(namespace["BareSampleLedger"]):  # type: ignore[misc, name-defined]
        def resume(self, saved: object) -> object:
            restored = super().resume(saved)
            self.store = {}
            return restored

    with pytest.raises(CoverageViolation) as info:
        namespace["run_integration_test"](
            LosesTheHeldSamples,
            settings=settings(
                DEFAULT_SETTINGS, database=None, phases=[Phase.generate], derandomize=True
            ),
        )
    assert info.value.invariant == "SAMPLE-EXACTLY-ONCE"
