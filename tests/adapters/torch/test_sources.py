"""The torch sources' resume checks: what would fail later fails at resume,
before anything changes."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchdata")

from frontier_adapters import StreamCollector  # noqa: E402
from frontier_adapters.torch import SnapshotSource  # noqa: E402
from torchdata.stateful_dataloader import StatefulDataLoader  # noqa: E402

from frontier_core import CheckpointMismatchError, LedgerConfig  # noqa: E402


def collector(nw: int) -> StreamCollector:
    torch.manual_seed(3)
    loader = StatefulDataLoader(
        list(range(20)), batch_size=3, shuffle=True, num_workers=nw, collate_fn=list
    )
    return StreamCollector(SnapshotSource(loader, stream_len=20), LedgerConfig(stream_len=20))


@pytest.mark.parametrize(("saved", "resumed"), [(2, 0), (0, 2), (2, 1)])
def test_a_snapshot_resume_with_another_worker_count_is_refused_up_front(
    saved: int, resumed: int
) -> None:
    c = collector(saved)
    got = c.take(5)
    c.landed([o for o, _ in got])
    c.trained([o for o, _ in got[:4]])
    state = json.loads(json.dumps(c.checkpoint_state()))
    d = collector(resumed)
    with pytest.raises(
        CheckpointMismatchError, match=f"num_workers={saved}.*num_workers={resumed}"
    ):
        d.resume(state, load_replay_buffer=True)
    # Refused before anything changed: the collector still serves a fresh run,
    # and the same state resumes into a loader of the saved worker count.
    assert [o for o, _ in d.take(3)] == [0, 1, 2]
    e = collector(saved)
    e.resume(state, load_replay_buffer=True)
    assert [o for o, _ in e.take(100)] == list(range(5, 20))  # 4 is in the restored buffer
