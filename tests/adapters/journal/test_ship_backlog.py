"""The shipper's queue is bounded while the store is down: a real SeaweedFS
server SIGKILLed and restarted under a writer (held back, never holding
more than ``max_queued_bytes``, nothing lost or shipped twice once the
server is back), and an endpoint nobody answers (a typed error within
``backlog_timeout``, the queue still bounded)."""

from __future__ import annotations

import threading
import time

import pytest
from frontier_adapters.journal import (
    JournalShipBacklogError,
    Shipper,
)
from frontier_adapters.store import Store, open_store

from ..._seaweed import Seaweed, free_ports
from ..._seaweed import s3_url as s3_url
from ..._seaweed import seaweed as seaweed
from ..._seaweed import seaweed_bucket as seaweed_bucket

GROUP = 200  # bytes a group
BOUND = 2_000  # max_queued_bytes: ten groups


def group(i: int) -> bytes:
    return f"{i:08d}".encode().ljust(GROUP, b".")


def shipped_bytes(store: Store, prefix: str) -> bytes:
    """The segments under ``prefix`` joined in record order."""
    keys = store.list(prefix)
    keys.sort(key=lambda k: int(k.rsplit("-", 2)[-2]))
    return b"".join(store.get(k, max_bytes=1 << 20) or b"" for k in keys)


def test_a_server_killed_under_the_writer_holds_it_back_within_the_bound(
    seaweed: Seaweed, s3_url: str
) -> None:
    store = open_store(s3_url, max_retries=1, retry_deadline_s=2.0)
    shipper = Shipper(
        store,
        "journal",
        segment_bytes=GROUP,  # a segment a group: the queue holds groups
        segment_seconds=0.05,
        max_queued_bytes=BOUND,
        backlog_timeout=120.0,
    )
    for i in range(5):
        shipper.committed(group(i), i + 1, i + 1)
    assert shipper.flush(60) == 5
    handed: list[int] = []
    queued: list[int] = []

    def writer() -> None:
        for i in range(5, 60):
            shipper.committed(group(i), i + 1, i + 1)
            handed.append(i)
            queued.append(shipper.queued_bytes)

    seaweed.kill()
    try:
        thread = threading.Thread(target=writer, daemon=True)
        thread.start()
        time.sleep(3.0)
        # Held back: the queue is full and nothing can go up.
        assert thread.is_alive() and len(handed) <= BOUND // GROUP
        assert shipper.shipped == 5 and shipper.error is not None
    finally:
        seaweed.start()
    thread.join(timeout=180)
    assert not thread.is_alive() and handed == list(range(5, 60))
    assert max(queued) <= BOUND
    assert shipper.flush(120) == 60 and shipper.queued_bytes == 0
    shipper.close()
    # Every group once, in order: nothing lost, nothing shipped twice.
    assert shipped_bytes(open_store(s3_url), "journal") == b"".join(group(i) for i in range(60))


def test_an_endpoint_nobody_answers_is_a_typed_error_within_the_backlog_timeout() -> None:
    pytest.importorskip("obstore")
    store = open_store(
        "s3://nobody/prefix",
        endpoint=f"http://127.0.0.1:{free_ports(1)[0]}",
        access_key_id="x",
        secret_access_key="x",
        region="us-east-1",
        allow_http=True,
        max_retries=1,
        retry_deadline_s=0.5,
        connect_timeout_s=0.5,
    )
    shipper = Shipper(store, segment_bytes=GROUP, max_queued_bytes=BOUND, backlog_timeout=1.0)
    began = time.monotonic()
    with pytest.raises(JournalShipBacklogError, match="max_queued_bytes=2000") as info:
        for i in range(10_000):
            shipper.committed(group(i), i + 1, i + 1)
            assert shipper.queued_bytes <= BOUND
    assert time.monotonic() - began < 30
    assert "no room was made within 1 s" in str(info.value) and i == BOUND // GROUP
    assert shipper.queued_bytes == BOUND and shipper.shipped == -1
    # The group refused was not taken: the next one continues the sequence
    # it would have (the writer, failed, hands nothing more; see test_ship).
    with pytest.raises(JournalShipBacklogError):
        shipper.committed(group(i), i + 1, i + 1)
    with pytest.raises(ValueError, match="max_queued_bytes"):
        Shipper(store, max_queued_bytes=0)
    with pytest.raises(ValueError, match="backlog_timeout"):
        Shipper(store, backlog_timeout=float("inf"))
