"""The server fixture's own rule: a server that cannot start fails the run
under ``FRONTIER_REQUIRE_S3=1`` and skips it otherwise, with the reason."""

from __future__ import annotations

import pytest
from frontier_adapters.store import Store, open_store

from ... import _seaweed


@pytest.mark.parametrize(("require", "outcome"), [(True, "fail"), (False, "skip")])
def test_a_server_that_cannot_start_fails_only_when_required(
    require: bool, outcome: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_seaweed, "REQUIRE", require)
    monkeypatch.setattr(_seaweed, "_SERVER", None)
    monkeypatch.setattr(_seaweed, "_FAILED", "weed server exited with 1: bind: address in use")
    expected = pytest.fail.Exception if outcome == "fail" else pytest.skip.Exception
    with pytest.raises(expected, match="address in use"):
        _seaweed.shared_server()


def test_both_stores_are_stores(tmp_path: object, s3_url: str) -> None:
    assert isinstance(open_store(str(tmp_path)), Store)
    assert isinstance(open_store(s3_url), Store)
