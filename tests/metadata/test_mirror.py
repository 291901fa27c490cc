"""PrefixMirror (stableline/metadata/mirror.py) on both stores: it starts with what is
there, follows every change in order, lets a writer read its own write, and re-reads
everything after its watch fell behind."""

from __future__ import annotations

import asyncio

from stableline.metadata import open_metadata_store
from stableline.metadata import store as store_module
from stableline.metadata.mirror import PrefixMirror

WAIT_S = 5.0


async def _two_sessions(open_store):
    first = await open_store()
    return (first, await open_store()) if open_store.kind == "etcd" else (first, first)


def _values(mirror: PrefixMirror) -> dict[str, bytes]:
    return {path: result.value for path, result in mirror.items()}


async def _scanned(store, prefix: str) -> dict[str, bytes]:
    return {path: result.value for path, result in await store.scan(prefix)}


async def test_a_mirror_starts_with_the_keys_there_and_follows_another_writer(open_store, root):
    writer, reader = await _two_sessions(open_store)
    await writer.put(f"{root}/m/a", b"1")
    await writer.put(f"{root}/m/b/c", b"2")
    await writer.put(f"{root}/other", b"not mirrored")
    mirror = PrefixMirror(reader, f"{root}/m")
    changed: list[str] = []
    mirror.listeners.append(changed.append)
    await mirror.start()
    assert _values(mirror) == {f"{root}/m/a": b"1", f"{root}/m/b/c": b"2"}
    await writer.put(f"{root}/m/a", b"1'")
    await writer.put(f"{root}/m/new", b"3")
    deleted_at = await writer.delete(f"{root}/m/b/c")
    assert await asyncio.wait_for(mirror.caught_up(deleted_at), WAIT_S)
    assert _values(mirror) == {f"{root}/m/a": b"1'", f"{root}/m/new": b"3"}
    assert changed[-3:] == [f"{root}/m/a", f"{root}/m/new", f"{root}/m/b/c"]
    await mirror.close()


async def test_a_writer_that_waits_for_its_revision_reads_its_own_write(open_store, root):
    store = await open_store()
    mirror = PrefixMirror(store, f"{root}/rw")
    await mirror.start()
    for i in range(20):
        stat = await store.put(f"{root}/rw/k", str(i).encode())
        assert await mirror.caught_up(stat.modified_revision)
        assert mirror.get(f"{root}/rw/k").value == str(i).encode()
    await mirror.close()


async def test_a_refresh_reads_through_and_keeps_what_it_read(open_store, root):
    writer, reader = await _two_sessions(open_store)
    mirror = PrefixMirror(reader, f"{root}/r")
    await mirror.start()
    stat = await writer.put(f"{root}/r/k", b"fresh")
    result = await mirror.refresh(f"{root}/r/k")
    assert result.value == b"fresh" and result.stat == stat
    assert mirror.get(f"{root}/r/k").value == b"fresh"
    assert await mirror.refresh(f"{root}/r/missing") is None
    await mirror.close()


async def test_a_burst_of_changes_to_one_key_ends_at_the_stores_value(open_store, root):
    writer, reader = await _two_sessions(open_store)
    mirror = PrefixMirror(reader, f"{root}/burst")
    await mirror.start()
    last = 0
    for round_ in range(10):
        last = (await writer.put(f"{root}/burst/k", str(round_).encode())).modified_revision
        if round_ % 3 == 0:
            last = await writer.delete(f"{root}/burst/k")
    assert await asyncio.wait_for(mirror.caught_up(last), WAIT_S)
    assert _values(mirror) == await _scanned(writer, f"{root}/burst")
    await mirror.close()


async def test_a_mirror_whose_watch_fell_behind_reads_everything_again(
    tmp_path, monkeypatch, caplog
):
    # The embedded store: concurrent writes share an fsync and their notifications
    # arrive together, more than a watch limited to 2 holds.
    store = await open_metadata_store("", embedded_dir=tmp_path / "metadata")
    mirror = PrefixMirror(store, "/o")
    await mirror.start()
    monkeypatch.setattr(store_module, "MAX_PENDING_NOTIFICATIONS", 2)
    await asyncio.gather(*(store.put(f"/o/{i}", b"x") for i in range(20)))
    monkeypatch.setattr(store_module, "MAX_PENDING_NOTIFICATIONS", 10_000)
    expected = await _scanned(store, "/o")
    assert len(expected) == 20
    async with asyncio.timeout(WAIT_S):
        while _values(mirror) != expected:
            await asyncio.sleep(0.01)  # the re-read runs in the mirror's task
    assert "fell behind" in caplog.text
    await mirror.close()
    await store.close()
