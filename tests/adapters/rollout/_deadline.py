"""The rollout tests' deadline: a coroutine run to its end, or a failed
test once ``DEADLINE`` seconds pass (a loop that never ends fails, never
hangs the suite)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

#: Seconds a test's event loop may run: these loops finish in well under a
#: second, so passing it means one that never ends.
DEADLINE = 60.0

_T = TypeVar("_T")


def run_within(coro: Coroutine[Any, Any, _T], seconds: float = DEADLINE) -> _T:
    """``asyncio.run(coro)``, failing the test (``AssertionError``) if it
    has not ended after ``seconds``."""

    async def bounded() -> _T:
        try:
            return await asyncio.wait_for(coro, seconds)
        except TimeoutError:
            raise AssertionError(f"the event loop did not end within {seconds} s") from None

    return asyncio.run(bounded())
