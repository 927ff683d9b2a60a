"""The journal is the truth: what aido records and what it does never part ways, checked from
outside with the official MCP SDK and the `aido replay` CLI (issue 8)."""

from __future__ import annotations

import os

import anyio
import pytest

from helpers import err, ok, seq_of

pytestmark = pytest.mark.anyio


def verified(world, session_prefix: str | None = None) -> None:
    sessions = world.run_json("replay", "sessions", "--json")
    assert sessions, "the journal has sessions"
    for s in sessions:
        proc = world.run("replay", "verify", s["id"])
        assert proc.returncode == 0, proc.stdout + proc.stderr


async def test_a_write_whose_old_contents_cannot_be_kept_is_refused_and_the_file_survives(world):
    """The reported bug: with blob_bytes_max = 4096 a pre-existing 10 KB file was replaced
    ("written, not kept") and a rewind then deleted it."""
    users = world.home / "users.txt"
    users.write_text("u" * 10 * 1024)
    async with world.session(config="[limits]\nblob_bytes_max = 4096\n") as s:
        sc = err(await s.call("write_file", {"path": "~/users.txt", "content": "agent"}), "contents_too_large")
        assert "nothing was changed" in sc["message"]
        assert users.read_text() == "u" * 10 * 1024
    verified(world)


async def test_a_rewind_gives_back_a_file_a_write_replaced(world):
    users = world.home / "data.bin"
    original = os.urandom(3 << 20) + b"tail"
    users.write_bytes(original)
    async with world.session() as s:
        r = await s.call("write_file", {"path": "~/data.bin", "content": "agent"})
        ok(r)
        seq = seq_of(r)
        assert users.read_bytes() == b"agent"
        out = await s.ok("rewind", {"before_seq": seq})
        assert [u["seq"] for u in out["undone"]] == [seq]
        assert users.read_bytes() == original
    verified(world)


async def test_rewinding_to_the_seq_a_result_carried_keeps_that_action(world):
    async with world.session() as s:
        first = await s.call("write_file", {"path": "~/a.txt", "content": "a"})
        second = await s.call("write_file", {"path": "~/b.txt", "content": "b"})
        third = await s.call("write_file", {"path": "~/a.txt", "content": "A"})
        out = await s.ok("rewind", {"to_seq": seq_of(second)})
        assert [u["seq"] for u in out["undone"]] == [seq_of(third)], out
        assert (world.home / "a.txt").read_text() == "a"
        assert (world.home / "b.txt").read_text() == "b", "the action rewound to is kept"
        out = await s.ok("rewind", {"before_seq": seq_of(first)})
        assert seq_of(first) in [u["seq"] for u in out["undone"]]
        assert not (world.home / "a.txt").exists() and not (world.home / "b.txt").exists()
        history = await s.ok("session_history", {"limit": 20})
        assert history["actions"], history
    verified(world)


async def test_directories_a_write_made_are_removed_by_a_rewind(world):
    async with world.session() as s:
        r = await s.call("write_file", {"path": "~/made/deeper/f.txt", "content": "x", "create_parents": True})
        ok(r)
        assert (world.home / "made/deeper/f.txt").exists()
        await s.ok("rewind", {"before_seq": seq_of(r)})
        assert not (world.home / "made").exists(), "the directories the write made are gone"
    verified(world)


async def test_a_snapshot_that_timed_out_never_appears_later(world):
    """The reported bug: create_snapshot under action_timeout_ms = 30 answered body_timeout and
    the snapshot was there seconds later, with no seq. Now a call either ran (and is in the
    journal) or never ran."""
    ws = world.home / "ws"
    for i in range(1500):
        d = ws / f"d{i % 30}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}.txt").write_text(f"file {i}\n" * 20)
    config = f'workdir = "{ws}"\n[snapshots]\nbackend = "copy"\n[limits]\naction_timeout_ms = 30\n'
    async with world.session(config=config) as s:
        # Several at once, so some wait behind others past their deadline.
        results: list = []

        async def take() -> None:
            results.append(await s.call("create_snapshot", {}))

        async with anyio.create_task_group() as tg:
            for _ in range(4):
                tg.start_soon(take)
        taken = {r.structured_content["snapshot"] for r in results if not r.is_error}
        failed = [r for r in results if r.is_error]
        for r in failed:
            assert r.structured_content["code"] == "body_timeout", r.structured_content
        await anyio.sleep(2)
    # A fresh session without the tight timeout lists exactly the snapshots that succeeded.
    async with world.session(config=f'workdir = "{ws}"\n[snapshots]\nbackend = "copy"\n') as s:
        listed = {x["id"] for x in (await s.ok("list_snapshots", {}))["snapshots"]}
    assert listed == taken, f"listed {listed}, the agent was told {taken} ({len(failed)} timed out)"
    verified(world)


async def test_verify_tree_holds_the_journal_against_the_workspace_and_names_what_it_does_not_account_for(world):
    """Issue 25, point 1: `aido replay verify --tree` compares every path the session touched
    (a command's change set with its bits and times, a write, a rewind) with the disk, and walks
    the write roots for changes since the session began that the journal does not account for:
    a change made outside aido is named, path by path."""
    (world.home / "untouched").mkdir()
    (world.home / "untouched" / "keep.txt").write_text("keep\n")
    (world.home / "untouched" / "gone.txt").write_text("gone\n")
    async with world.session() as s:
        out = await s.ok("run_command", {"shell": "mkdir -p out/sub && echo x > out/sub/x.txt && "
                                                  "ln -s sub out/link && chmod 700 out && touch -d @1000000000 out/sub/x.txt"})
        assert out["exit_code"] == 0, out
        await s.ok("write_file", {"path": "~/notes.txt", "content": "rewritten\n"})
    [session] = world.run_json("replay", "sessions", "--json")
    clean = world.run("replay", "verify", session["id"], "--tree", "--json")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    tree = __import__("json").loads(clean.stdout)["tree"]
    assert tree["checked"] >= 5 and tree["findings"] == [], tree
    # The file's time, to the nanosecond, is part of what the journal says.
    assert (world.home / "out" / "sub" / "x.txt").stat().st_mtime_ns == 1000000000 * 10**9
    # Changes made outside aido: a file a command made is edited, a new file appears, a file
    # in a directory the session never touched is removed.
    (world.home / "out" / "sub" / "x.txt").write_text("edited by hand\n")
    (world.home / "stray.txt").write_text("not through aido\n")
    (world.home / "untouched" / "gone.txt").unlink()
    dirty = world.run("replay", "verify", session["id"], "--tree", "--json")
    assert dirty.returncode == 1, dirty.stdout + dirty.stderr
    found = {f["path"].removeprefix(str(world.home.resolve()) + "/"): f["kind"]
             for f in __import__("json").loads(dirty.stdout)["tree"]["findings"]}
    assert found == {
        "out/sub/x.txt": "tree_mismatch",
        "stray.txt": "unaccounted",
        "untouched": "unaccounted",
    }, found


async def test_verify_tree_after_a_rewind_checks_what_the_rewind_gave_back(world):
    """`verify --tree` after a rewind: the paths only the abandoned command touched hold what
    they held before it (checked, not skipped), the rewind's own changes are accounted for, so
    a clean rewind verifies clean, and a file the rewind should have removed is named."""
    (world.home / "kept.txt").write_text("before\n")
    async with world.session() as s:
        first = await s.call("run_command", {"shell": "mkdir -p gen/a && for i in 1 2 3; do echo $i > gen/a/$i; done && "
                                                       "echo after > kept.txt && touch -d @1000000000 kept.txt"})
        assert ok(first)["exit_code"] == 0, first
        assert (world.home / "gen" / "a" / "3").exists()
        await s.ok("rewind", {"before_seq": seq_of(first)})
    assert not (world.home / "gen").exists()
    assert (world.home / "kept.txt").read_text() == "before\n"
    [session] = world.run_json("replay", "sessions", "--json")
    clean = world.run("replay", "verify", session["id"], "--tree", "--json")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    tree = __import__("json").loads(clean.stdout)["tree"]
    assert tree["findings"] == [] and tree["checked"] >= 5, tree
    # Something the rewind should have taken away, back by hand: named as a mismatch.
    (world.home / "gen" / "a").mkdir(parents=True)
    (world.home / "gen" / "a" / "2").write_text("2\n")
    dirty = world.run("replay", "verify", session["id"], "--tree", "--json")
    assert dirty.returncode == 1, dirty.stdout + dirty.stderr
    found = {f["path"].removeprefix(str(world.home.resolve()) + "/"): f["kind"]
             for f in __import__("json").loads(dirty.stdout)["tree"]["findings"]}
    assert found.get("gen/a/2") == "tree_mismatch" and found.get("gen") == "tree_mismatch", found
