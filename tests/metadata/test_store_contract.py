"""The ClusterMetadataStore promises (stableline/metadata/store.py), on both implementations.

Every test here runs twice: on the embedded store (LMDB) and on a real etcd.
"""

from __future__ import annotations

import asyncio

import pytest

from stableline.metadata import (
    AlreadyExists,
    BadVersion,
    ClusterMetadataStore,
    InvalidPath,
    NotFound,
    Notification,
    NotificationType,
)

WAIT_S = 5.0


async def _two_writers(open_store) -> tuple[ClusterMetadataStore, ClusterMetadataStore]:
    """Two sessions of one store (etcd); the embedded store has one writer process,
    so its two writers are coroutines on one store."""
    first = await open_store()
    return (first, await open_store()) if open_store.kind == "etcd" else (first, first)


async def _next(watch) -> Notification:
    return await asyncio.wait_for(anext(watch), WAIT_S)


async def test_put_creates_at_version_zero_and_each_put_adds_one(open_store, root):
    store = await open_store()
    created = await store.put(f"{root}/a", b"one")
    assert created.version == 0 and not created.ephemeral
    assert created.created_revision == created.modified_revision
    modified = await store.put(f"{root}/a", b"two")
    assert modified.version == 1
    assert modified.created_revision == created.created_revision
    assert modified.modified_revision > created.modified_revision
    result = await store.get(f"{root}/a")
    assert result.value == b"two" and result.stat == modified
    assert await store.exists(f"{root}/a")
    assert await store.get(f"{root}/missing") is None
    assert not await store.exists(f"{root}/missing")


async def test_compare_and_set_applies_only_at_the_expected_version(open_store, root):
    store = await open_store()
    path = f"{root}/cas"
    with pytest.raises(BadVersion, match="does not exist"):
        await store.put(path, b"x", 0)
    await store.put(path, b"v0", -1)
    with pytest.raises(AlreadyExists, match="already exists") as refused:
        await store.put(path, b"again", -1)
    assert isinstance(refused.value, BadVersion) and refused.value.actual == 0
    with pytest.raises(BadVersion, match="at version 0, expected version 3"):
        await store.put(path, b"stale", 3)
    assert (await store.put(path, b"v1", 0)).version == 1
    assert (await store.get(path)).value == b"v1"


async def test_a_guarded_write_applies_all_of_it_only_while_its_guard_is_unchanged(
    open_store, root
):
    store = await open_store()
    guard = f"{root}/guard"
    await store.put(guard, b"writer 1", -1)
    await store.put(f"{root}/log/old", b"gone soon")
    watch = await store.watch(f"{root}/log")
    await store.write_guarded(
        guard, 0, {f"{root}/log/a": b"1", f"{root}/log/b": b"2"}, [f"{root}/log/old"]
    )
    await store.write_guarded(guard, 0, {f"{root}/log/a": b"1 again"}, [f"{root}/log/absent"])
    assert [(path, result.value) for path, result in await store.scan(f"{root}/log")] == [
        (f"{root}/log/a", b"1 again"),
        (f"{root}/log/b", b"2"),
    ]
    seen = [await _next(watch) for _ in range(4)]
    assert [(n.type, n.path) for n in seen] == [
        (NotificationType.CREATED, f"{root}/log/a"),
        (NotificationType.CREATED, f"{root}/log/b"),
        (NotificationType.DELETED, f"{root}/log/old"),
        (NotificationType.MODIFIED, f"{root}/log/a"),
    ]
    # Another writer takes the guard: the first one's next write changes nothing.
    await store.put(guard, b"writer 2", 0)
    with pytest.raises(BadVersion, match="at version 1, expected version 0"):
        await store.write_guarded(guard, 0, {f"{root}/log/a": b"stale"}, [f"{root}/log/b"])
    assert [result.value for _, result in await store.scan(f"{root}/log")] == [b"1 again", b"2"]
    with pytest.raises(BadVersion, match="does not exist"):
        await store.write_guarded(f"{root}/no-guard", 0, {f"{root}/log/c": b"3"}, [])
    assert await store.get(f"{root}/log/c") is None


async def test_of_two_writers_at_one_version_exactly_one_wins(open_store, root):
    first, second = await _two_writers(open_store)
    path = f"{root}/race"
    await first.put(path, b"start")
    outcomes = await asyncio.gather(
        first.put(path, b"first", 0), second.put(path, b"second", 0), return_exceptions=True
    )
    winners = [o for o in outcomes if not isinstance(o, BaseException)]
    losers = [o for o in outcomes if isinstance(o, BadVersion)]
    assert len(winners) == 1 and len(losers) == 1, outcomes
    assert (await second.get(path)).value in (b"first", b"second")
    assert (await first.get(path)).stat.version == 1

    creations = await asyncio.gather(
        *(
            writer.put(f"{root}/created-once", str(i).encode(), -1)
            for i, writer in enumerate([first, second] * 5)
        ),
        return_exceptions=True,
    )
    assert sum(not isinstance(c, BaseException) for c in creations) == 1, creations
    assert all(isinstance(c, AlreadyExists) for c in creations if isinstance(c, BaseException))


async def test_delete_checks_existence_and_version(open_store, root):
    store = await open_store()
    with pytest.raises(NotFound, match=f"{root}/gone does not exist"):
        await store.delete(f"{root}/gone")
    await store.put(f"{root}/d", b"x")
    await store.put(f"{root}/d", b"y")
    with pytest.raises(BadVersion):
        await store.delete(f"{root}/d", 0)
    assert await store.exists(f"{root}/d")
    await store.delete(f"{root}/d", 1)
    assert await store.get(f"{root}/d") is None
    await store.put(f"{root}/e", b"x")
    await store.delete(f"{root}/e")
    with pytest.raises(NotFound):
        await store.delete(f"{root}/e", 0)


async def test_children_are_the_next_segments_below_a_path_sorted(open_store, root):
    store = await open_store()
    for path in ("b/1", "a", "a/x/deep", "c/2", "c/3"):
        await store.put(f"{root}/dir/{path}", b"")
    await store.put(f"{root}/dirt", b"")  # shares the text prefix, not the directory
    assert await store.children(f"{root}/dir") == ["a", "b", "c"]
    assert await store.children(f"{root}/dir/c") == ["2", "3"]
    assert await store.children(f"{root}/dir/a/x/deep") == []
    assert await store.children(f"{root}/nothing") == []


async def test_scan_reads_every_key_at_and_below_a_prefix_with_its_stat(open_store, root):
    store = await open_store()
    stats = {}
    for path in ("", "/b", "/a", "/a/deep/er"):
        stats[f"{root}/s{path}"] = await store.put(f"{root}/s{path}", path.encode())
    await store.put(f"{root}/s-sibling", b"")  # shares the text prefix, not the directory
    await store.put(f"{root}/sx", b"")
    found = await store.scan(f"{root}/s")
    assert [path for path, _ in found] == sorted(stats)
    for path, result in found:
        assert result.stat == stats[path]
        assert result.value == path.removeprefix(f"{root}/s").encode()
    assert await store.scan(f"{root}/nothing") == []
    assert [path for path, _ in await store.scan(f"{root}/s/a/deep/er")] == [f"{root}/s/a/deep/er"]


async def test_notifications_carry_the_revision_and_the_value_of_each_change(open_store, root):
    writer = await open_store()
    watcher = await open_store() if open_store.kind == "etcd" else writer
    watch = await watcher.watch(f"{root}/n")
    created = await writer.put(f"{root}/n", b"one")
    modified = await writer.put(f"{root}/n", b"two")
    deleted_at = await writer.delete(f"{root}/n")
    first, second, third = [await _next(watch) for _ in range(3)]
    assert (first.revision, first.result.value, first.result.stat) == (
        created.modified_revision,
        b"one",
        created,
    )
    assert (second.revision, second.result.value, second.result.stat) == (
        modified.modified_revision,
        b"two",
        modified,
    )
    assert third.revision == deleted_at > modified.modified_revision and third.result is None


async def test_watch_sees_creation_change_and_deletion_under_its_prefix_only(open_store, root):
    writer = await open_store()
    watcher = await open_store() if open_store.kind == "etcd" else writer
    watch = await watcher.watch(f"{root}/w")
    await writer.put(f"{root}/other", b"not watched")
    await writer.put(f"{root}/w", b"the prefix itself")
    await writer.put(f"{root}/w/k", b"1")
    await writer.put(f"{root}/w/k", b"2")
    await writer.delete(f"{root}/w/k")
    seen = [await _next(watch) for _ in range(4)]
    assert seen == [
        Notification(NotificationType.CREATED, f"{root}/w"),
        Notification(NotificationType.CREATED, f"{root}/w/k"),
        Notification(NotificationType.MODIFIED, f"{root}/w/k"),
        Notification(NotificationType.DELETED, f"{root}/w/k"),
    ]
    watch.close()
    with pytest.raises(StopAsyncIteration):
        await _next(watch)


async def test_ephemeral_key_goes_when_its_session_closes(open_store, root):
    writer = await open_store()
    path = f"{root}/alive"
    stat = await writer.put(path, b"me", -1, ephemeral=True)
    assert stat.ephemeral and (await writer.get(path)).stat.ephemeral
    await writer.put(f"{root}/kept", b"persistent")
    if open_store.kind == "etcd":
        reader = await open_store()
        watch = await reader.watch(path)
        await writer.close()
        assert await _next(watch) == Notification(NotificationType.DELETED, path)
    else:
        watch = await writer.watch(path)
        await writer.close()
        assert await _next(watch) == Notification(NotificationType.DELETED, path)
        reader = await open_store()
    assert await reader.get(path) is None
    assert (await reader.get(f"{root}/kept")).value == b"persistent"


async def test_a_put_without_ephemeral_makes_the_key_persistent(open_store, root):
    writer = await open_store()
    path = f"{root}/promoted"
    await writer.put(path, b"a", ephemeral=True)
    assert not (await writer.put(path, b"b", 0)).ephemeral
    await writer.close()
    reader = await open_store()
    assert (await reader.get(path)).value == b"b"


async def test_malformed_paths_are_refused(open_store):
    store = await open_store()
    for path in ("relative", "/", "/trailing/", "/double//slash", ""):
        with pytest.raises(InvalidPath):
            await store.put(path, b"")
    with pytest.raises(InvalidPath):
        await store.watch("no-slash")
