"""The journal off the node: groups shipped to a store as immutable
segments, the local file restored from them after the node is lost, and
every way a shipped journal can lie refused with the file's typed errors.
Run on a POSIX store here; tests/adapters/store runs the store contract on
a real S3 server too, and the Run's kill test loses whole nodes."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from frontier_adapters.journal import (
    JournalShipError,
    RolloutJournal,
    Shipper,
    read_journal,
    restore,
)
from frontier_adapters.store import PosixStore

from frontier_core import Lease
from frontier_core.journal import (
    JournalCorruptError,
    JournalMismatchError,
    JournalSequenceError,
    Reuse,
    TokenPayload,
)

from ..._outage import store_down, store_up

FP, LINEAGE = "ship-v1", "run-1"


def journal(tmp: Path, remote: Path, **kw: object) -> RolloutJournal:
    shipper = Shipper(PosixStore(remote), segment_bytes=kw.pop("segment_bytes", 1 << 20))  # type: ignore[arg-type]
    return RolloutJournal(tmp / "journal", fingerprint=FP, lineage=LINEAGE, ship_to=shipper, **kw)  # type: ignore[arg-type]


def sample(n: int) -> TokenPayload:
    return TokenPayload.of(list(range(n)), [-0.5] * n, 0)


def seal_some(j: RolloutJournal, ordinals: range) -> None:
    for o in ordinals:
        j.sealed(Lease(o, 0, o), sample(3 + o))


def test_what_a_mark_covers_is_shipped_before_the_mark_returns(tmp_path: Path) -> None:
    local, remote = tmp_path / "node", tmp_path / "remote"
    local.mkdir()
    j = journal(local, remote)
    seal_some(j, range(5))
    position = j.mark(1)
    assert j.shipper is not None and j.shipper.shipped >= position
    shipped = restore(PosixStore(remote))
    assert shipped is not None and shipped.last >= position
    j.close()
    assert read_journal(local / "journal").records == read_journal_bytes(shipped.data).records


def read_journal_bytes(data: bytes) -> object:
    from frontier_core.journal import decode

    return decode(data, fingerprint=FP, lineage=LINEAGE)


def test_a_lost_node_is_restored_from_the_shipped_journal(tmp_path: Path) -> None:
    local, remote = tmp_path / "node", tmp_path / "remote"
    local.mkdir()
    j = journal(local, remote)
    j.recover(None, position=None, checkpoint_id=None, reuse=Reuse.everything(), fork=0, step=0)
    seal_some(j, range(4))
    j.mark(1)
    j.writer.sync()
    j.close()
    shutil.rmtree(local)  # the node is gone, and its disk with it
    local.mkdir()
    again = journal(local, remote)
    assert again.restored is not None and again.restored.source == "shipped"
    assert again.restored.local_last == -1
    state = again.writer.read()
    assert [r.ordinal for r in state.records if hasattr(r, "payload")] == [0, 1, 2, 3]
    again.close()


def test_a_local_file_behind_the_shipped_one_is_replaced_and_a_foreign_one_refused(
    tmp_path: Path,
) -> None:
    local, remote = tmp_path / "node", tmp_path / "remote"
    local.mkdir()
    j = journal(local, remote)
    seal_some(j, range(2))
    j.mark(1)
    stale = (local / "journal").read_bytes()  # a backup taken here
    seal_some(j, range(2, 6))
    j.mark(2)
    j.close()
    (local / "journal").write_bytes(stale)  # the node comes back from its backup
    again = journal(local, remote)
    assert again.restored is not None and again.restored.source == "shipped"
    assert again.restored.local_last < again.restored.shipped_last
    again.close()

    other = tmp_path / "other"
    other.mkdir()
    RolloutJournal(other / "journal", fingerprint=FP, lineage=LINEAGE).close()
    shutil.copy(other / "journal", local / "journal")  # another journal at our path
    with pytest.raises(JournalMismatchError):
        journal(local, remote)


def test_compaction_ships_a_base_and_deletes_what_it_supersedes(tmp_path: Path) -> None:
    local, remote = tmp_path / "node", tmp_path / "remote"
    local.mkdir()
    j = journal(local, remote, segment_bytes=1)  # a segment per group
    for o in range(6):
        seal_some(j, range(o, o + 1))
        j.writer.sync()
    j.mark(1)
    store = PosixStore(remote)
    before = store.list("journal")
    assert sum("/seg-" in k for k in before) >= 6
    j.compact(range(4, 1 << 62))
    assert j.shipper is not None
    j.shipper.flush(30)
    after = store.list("journal")
    assert sum("/base-" in k for k in after) == 1
    assert not any("/seg-" in k for k in after)
    shipped = restore(store)
    assert shipped is not None
    j.close()


def test_time_rolls_a_segment_in_the_background(tmp_path: Path) -> None:
    local, remote = tmp_path / "node", tmp_path / "remote"
    local.mkdir()
    shipper = Shipper(PosixStore(remote), segment_seconds=0.05)
    j = RolloutJournal(local / "journal", fingerprint=FP, lineage=LINEAGE, ship_to=shipper)
    seal_some(j, range(3))
    last = j.writer.sync()
    deadline = time.monotonic() + 30
    while shipper.shipped < last:  # no flush: the thread rolls it on time
        assert time.monotonic() < deadline, "a due segment was not shipped in 30 s"
        time.sleep(0.01)
    j.close()


# -- a shipped journal that lies ----------------------------------------------------


def shipped_journal(tmp_path: Path) -> tuple[Path, Path]:
    local, remote = tmp_path / "node", tmp_path / "remote"
    local.mkdir(parents=True)
    j = journal(local, remote, segment_bytes=1)
    for o in range(5):
        seal_some(j, range(o, o + 1))
        j.writer.sync()
    j.mark(1)
    j.close()
    return local, remote


def test_a_gap_between_segments_is_a_sequence_error(tmp_path: Path) -> None:
    _, remote = shipped_journal(tmp_path)
    store = PosixStore(remote)
    segments = [k for k in store.list("journal") if "/seg-" in k]
    store.delete(segments[1])
    with pytest.raises(JournalSequenceError):
        restore(store)


def test_a_stranger_under_the_prefix_is_refused(tmp_path: Path) -> None:
    _, remote = shipped_journal(tmp_path)
    store = PosixStore(remote)
    store.create("journal/notes.txt", b"hello")
    with pytest.raises(JournalCorruptError, match="neither a base nor a segment"):
        restore(store)


@pytest.mark.parametrize("where", ["middle", "end"])
def test_another_runs_segment_is_never_replayed(tmp_path: Path, where: str) -> None:
    """A segment of another run under the same name (the same sequence
    numbers): an error wherever it is; none of its records is replayed. (At
    the end it is not a torn tail, as it would be in a file: an object is
    whole, and its name says which records it holds.)"""
    local, remote = shipped_journal(tmp_path)
    _, theirs_remote = shipped_journal(tmp_path / "theirs")
    store, theirs = PosixStore(remote), PosixStore(theirs_remote)
    segments = sorted(k for k in store.list("journal") if "/seg-" in k)
    segment = segments[1] if where == "middle" else segments[-1]
    data = theirs.get(segment, max_bytes=1 << 20)
    assert data is not None and data != store.get(segment, max_bytes=1 << 20)
    store.delete(segment)
    store.create(segment, data)
    shutil.rmtree(local)
    local.mkdir()
    with pytest.raises(JournalCorruptError):
        journal(local, remote)
    assert not (local / "journal").exists()  # nothing was written in its place


@pytest.mark.parametrize("damage", ["empty", "truncated", "zeros", "junk_next"])
def test_a_damaged_last_object_is_an_error_not_a_torn_tail(tmp_path: Path, damage: str) -> None:
    """The last segment holds the last reservation a life waited for: taken
    for a torn tail, a new node would deal that life's attempts again and
    accept its late answers (found by a new-user audit)."""
    local, remote = shipped_journal(tmp_path)
    store = PosixStore(remote)
    last = sorted(k for k in store.list("journal") if "/seg-" in k)[-1]
    data = store.get(last, max_bytes=1 << 20)
    assert data is not None
    if damage == "junk_next":
        end = int(last.rsplit("-", 1)[-1])  # a shipper without epochs: no suffix
        store.create(f"journal/seg-{end + 1:020d}-{end + 1:020d}", b"junk")
    else:
        store.delete(last)
        cut = {"empty": b"", "truncated": data[: len(data) // 2], "zeros": bytes(len(data))}
        store.create(last, cut[damage])
    shutil.rmtree(local)
    local.mkdir()
    with pytest.raises(JournalCorruptError, match="damaged in the store"):
        journal(local, remote)
    assert not (local / "journal").exists()


class SlowBases(PosixStore):
    """A directory store that takes its time over whole journal files."""

    def create(self, key: str, data: bytes) -> str:
        if "/base-" in key:
            time.sleep(0.3)
        return super().create(key, data)


def test_a_compaction_is_up_in_the_store_before_it_is_in_place(tmp_path: Path) -> None:
    """So the node's file always extends the shipped copy: a restart on this
    node during an outage that began right after a compaction keeps what
    the node holds (a compacted file whose base was not up was set aside,
    and its records after the compaction generated again)."""
    local, remote, parked = tmp_path / "node", tmp_path / "remote", tmp_path / "parked"
    local.mkdir()

    def opened() -> RolloutJournal:
        shipper = Shipper(SlowBases(remote), segment_bytes=1 << 20, segment_seconds=3600.0)
        return RolloutJournal(
            local / "journal", fingerprint=FP, lineage=LINEAGE, ship_to=shipper, ship_timeout=30.0
        )

    j = opened()
    seal_some(j, range(4))
    j.mark(1)
    durable = j.compact(range(2, 1 << 62))
    shipped = restore(PosixStore(remote))
    assert shipped is not None and shipped.last == durable
    assert (local / "journal").read_bytes().startswith(shipped.data)
    store_down(remote, parked)  # the outage: nothing more goes up
    seal_some(j, range(4, 6))
    j.writer.sync()
    with pytest.raises(JournalShipError):
        j.close(ship_timeout=0.5)
    store_up(remote, parked)
    again = opened()
    assert again.writer.read().last_seq == durable + 2  # the node's two seals kept
    assert not list(local.glob("journal.stale-*"))
    again.close()


def test_a_flush_the_store_cannot_take_is_a_typed_error_in_time(tmp_path: Path) -> None:
    local, remote = tmp_path / "node", tmp_path / "remote"
    local.mkdir()
    j = journal(local, remote, ship_timeout=1.0)
    remote_parked = tmp_path / "parked"
    seal_some(j, range(2))
    j.writer.sync()
    store_down(remote, remote_parked)  # every upload fails from now on
    began = time.monotonic()
    with pytest.raises(JournalShipError, match="could not be uploaded"):
        j.mark(1)
    assert time.monotonic() - began < 30
    store_up(remote, remote_parked)  # the outage ends: shipping catches up
    assert j.shipper is not None and j.shipper.flush(30) >= 0
    j.close()


# -- lives that find their own objects, or another life's ---------------------------


def test_a_reopened_journal_ships_again_without_sticking(tmp_path: Path) -> None:
    """A clean close, then a reopen on the same node (its base is already
    up: the same bytes under the same name) and a node loss right after a
    compaction (the new node restores exactly that base and re-ships it):
    neither is a conflict, and marks keep shipping."""
    local, remote = tmp_path / "node", tmp_path / "remote"
    local.mkdir()
    j = journal(local, remote, ship_timeout=5.0)
    seal_some(j, range(3))
    j.mark(1)
    j.compact(range(0, 1 << 62))
    j.close()
    for lost in (False, True):
        if lost:
            shutil.rmtree(local)
            local.mkdir()
        again = journal(local, remote, ship_timeout=5.0)
        seal_some(again, range(3, 4))
        assert again.mark(2) > 0  # shipped through the mark, in time
        again.close()


def test_a_node_that_comes_back_with_a_diverged_journal_is_not_replayed(tmp_path: Path) -> None:
    """Life 1 on node A writes past what it shipped and dies; life 2 on node
    B restores the shipped copy and goes on (other records at the same
    sequence numbers); node A comes back: its file is ahead by sequence
    number but not the shipped history, so the shipped copy is used and A's
    file is kept aside, never replayed."""
    a, b, remote = tmp_path / "a", tmp_path / "b", tmp_path / "remote"
    a.mkdir()
    b.mkdir()
    one = journal(a, remote)
    seal_some(one, range(2))
    one.mark(1)
    parked = tmp_path / "parked"
    remote.rename(parked)  # the store is unreachable: A's next records stay local
    seal_some(one, range(10, 20))
    one.writer.sync()
    assert one.shipper is not None
    one.shipper._stopping = True  # the process dies: nothing more is shipped
    one.writer.close()
    parked.rename(remote)
    two = journal(b, remote)  # node B: restores what life 1 shipped
    seal_some(two, range(2, 4))
    two.mark(2)
    two.close()
    back = journal(a, remote)  # node A comes back
    assert back.restored is not None and back.restored.source == "shipped"
    replayed = {r.ordinal for r in back.writer.read().records if hasattr(r, "payload")}
    assert replayed == {0, 1, 2, 3}  # life 2's, none of life 1's unshipped 10..19
    assert list(a.glob("journal.stale-*"))
    back.close()


def test_a_shipper_that_fails_to_take_a_group_leaves_the_journal_readable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local, remote = tmp_path / "node", tmp_path / "remote"
    local.mkdir()
    j = journal(local, remote)
    assert j.shipper is not None

    def refuse(data: bytes, first: int, last: int) -> None:
        raise MemoryError("no room for the group")

    monkeypatch.setattr(j.shipper, "committed", refuse)
    seal_some(j, range(1))
    with pytest.raises(MemoryError):
        j.writer.sync()
    with pytest.raises(Exception, match="failed"):
        j.writer.append(j.writer.read().records[0])  # the writer is done
    monkeypatch.undo()
    j.close()
    assert read_journal(local / "journal").last_seq >= 1  # and the file is sound


@pytest.mark.parametrize("local_file", ["lost", "kept"])
def test_a_resume_decodes_the_journal_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, local_file: str
) -> None:
    """A resume (restore, the writer's open, ``recover``) decodes the
    journal once, not once per step: from the shipped copy on a new node,
    and from the node's own file that extends it (compared by bytes). What
    it recovers is the same."""
    from frontier_adapters.journal import _files

    from frontier_core import Checkpoint

    local, remote = tmp_path / "node", tmp_path / "remote"
    local.mkdir()
    j = journal(local, remote)
    j.recover(None, position=None, checkpoint_id=None, reuse=Reuse.everything(), fork=0, step=0)
    seal_some(j, range(4))
    position = j.mark(1)
    j.close()
    if local_file == "lost":
        shutil.rmtree(local)
        local.mkdir()
    decode, decoded = _files.decode, []

    def counted(data: bytes, **kw: object) -> object:
        decoded.append(len(data))
        return decode(data, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(_files, "decode", counted)
    again = journal(local, remote)
    got = again.recover(
        Checkpoint(cut=0, samples=1, next_attempt=4), position=position, checkpoint_id=1,
        reuse=Reuse.everything(), fork=1, step=1,
    )  # fmt: skip
    assert len(decoded) == 1
    assert sorted(lease.ordinal for lease in got.sealed) == [0, 1, 2, 3]
    monkeypatch.undo()
    again.close()
