"""The elastic torchrun job under real SIGKILLs: train on 3 ranks, kill one
rank, resume on 2, kill, resume on 4, kill, finish on 1; shuffled, across an
epoch boundary, with the per-rank batch changing with the world size. Then
``frontier audit`` must find every ordinal trained or dropped exactly once,
no process of any life may be left behind, and every socket the job
listened on must be on the loopback interface.

The long run is a command, not a test:
    python -m frontier_adapters.verify elastic-torture --workdir /tmp/elastic --kills 12
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchdata")

from frontier_adapters.store import open_store
from frontier_adapters.verify.elastic_job import is_loopback, per_rank_batch, torture

from ..._seaweed import s3_url as s3_url
from ..._seaweed import seaweed as seaweed
from ..._seaweed import seaweed_bucket as seaweed_bucket


def test_a_torchrun_job_resumes_exactly_once_on_any_world_size(tmp_path: Path) -> None:
    worlds = (3, 2, 4, 1)
    result = torture(tmp_path, kills=3, worlds=worlds, seed=1, rows=40, epochs=2, timeout=300)
    # Three lives killed (one rank each, torchrun tore the rest down), on
    # 3, 2 and 4 ranks; the fourth life, on 1 rank, ran to the end.
    assert result.kills == 3
    assert result.worlds == worlds
    assert [life.killed_rank is not None for life in result.lives] == [True, True, True, False]
    assert all(life.exit_code != 0 for life in result.lives[:3])
    assert result.lives[3].exit_code == 0
    assert len({per_rank_batch(8, w) for w in result.worlds}) == 4  # 3, 4, 2, 8
    # Nothing left behind, nothing listening beyond the loopback interface.
    assert result.leftovers == 0
    assert result.listening and all(is_loopback(a) for a in result.listening), result.listening
    # The audit ran on this log and this stream (2 shuffled epochs of 40).
    assert result.audit_exit == 0 and result.audit["clean"] is True
    assert result.audit["stream_len"] == result.stream_len == 80
    assert result.skipped == () and result.duplicated == ()
    assert result.trained_once + result.dropped == 80
    assert result.clean


def test_a_torchrun_job_with_its_checkpoints_on_s3_resumes_exactly_once(
    tmp_path: Path, s3_url: str
) -> None:
    """The same job with every life's checkpoints on the S3 server: torchrun
    ranks write their parts and rank 0 commits with a conditional write;
    a life killed on 2 ranks, the next one finishes on 1 from the bucket."""
    result = torture(
        tmp_path, kills=1, worlds=(2, 1), seed=2, rows=24, epochs=1, timeout=300, checkpoints=s3_url
    )
    assert result.kills == 1 and result.worlds == (2, 1)
    assert result.lives[0].killed_rank is not None and result.lives[1].exit_code == 0
    assert result.audit_exit == 0 and result.audit["clean"] is True
    assert result.skipped == () and result.duplicated == ()
    assert result.trained_once + result.dropped == 24 and result.clean
    keys = open_store(s3_url).list()
    assert "COMMIT" in keys and any(k.endswith("rank-00000-of-00001.json") for k in keys)
    assert not (tmp_path / "checkpoints").exists()  # nothing on the node


def test_loopback_addresses_are_told_apart() -> None:
    assert (
        is_loopback("127.0.0.1:5") and is_loopback("::1:80") and is_loopback("::ffff:127.0.0.1:9")
    )
    assert not is_loopback(":::29500") and not is_loopback("0.0.0.0:1")
    assert not is_loopback("10.0.0.2:22")
