"""MEMORY.md / USER.md: limits, exact edits, atomic writes and the frozen snapshot."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest

from agent.memory import (
    TARGETS,
    MemoryEditError,
    MemoryLimitError,
    MemoryStore,
    MemoryTarget,
    MemoryToolError,
    format_usage,
    parse_entries,
)


@pytest.fixture()
def memories(tmp_path: Path) -> Path:
    return tmp_path / "memories"


@pytest.fixture()
def store(memories: Path) -> MemoryStore:
    return MemoryStore(memories, 2200, 1375)


def test_targets_match_the_literal() -> None:
    assert get_args(MemoryTarget) == TARGETS


@pytest.mark.parametrize(
    ("used", "limit", "expected"),
    [
        (1474, 2200, "[67% — 1,474/2,200 chars]"),
        (0, 1375, "[0% — 0/1,375 chars]"),
        (2199, 2200, "[99% — 2,199/2,200 chars]"),
        (2200, 2200, "[100% — 2,200/2,200 chars]"),
        (2500, 2200, "[113% — 2,500/2,200 chars]"),
    ],
)
def test_format_usage(used: int, limit: int, expected: str) -> None:
    assert format_usage(used, limit) == expected


def test_add_creates_directory_and_file(store: MemoryStore, memories: Path) -> None:
    assert not memories.exists()
    message = store.add("memory", "  User's project uses uv.  ")
    assert (memories / "MEMORY.md").read_text(encoding="utf-8") == "User's project uses uv."
    assert message == "Added to MEMORY.md [1% — 23/2,200 chars]"


def test_entries_are_joined_by_section_sign_lines(store: MemoryStore, memories: Path) -> None:
    store.add("user", "Name: Ada")
    store.add("user", "Prefers short answers\nand metric units")
    assert (memories / "USER.md").read_text(encoding="utf-8") == (
        "Name: Ada\n§\nPrefers short answers\nand metric units"
    )
    assert store.entries("user") == ["Name: Ada", "Prefers short answers\nand metric units"]
    assert store.entries("memory") == []
    assert store.read("memory") == ""


def test_hand_edited_file_is_parsed_tolerantly() -> None:
    assert parse_entries("§\n one \r\n  §  \n\n§\ntwo\n§\n") == ["one", "two"]


def test_empty_and_duplicate_content_rejected(store: MemoryStore) -> None:
    store.add("memory", "fact")
    with pytest.raises(MemoryEditError, match="empty"):
        store.add("memory", "   \n")
    with pytest.raises(MemoryEditError, match="already has exactly this entry"):
        store.add("memory", " fact ")
    assert store.entries("memory") == ["fact"]


def test_content_with_separator_line_rejected(store: MemoryStore) -> None:
    with pytest.raises(MemoryEditError, match="separately"):
        store.add("memory", "one\n§\ntwo")


def test_over_limit_add_leaves_file_unchanged(memories: Path) -> None:
    store = MemoryStore(memories, memory_char_limit=30, user_char_limit=1375)
    store.add("memory", "a" * 10)
    store.add("memory", "b" * 10)
    before = (memories / "MEMORY.md").read_bytes()
    with pytest.raises(MemoryLimitError) as caught:
        store.add("memory", "c" * 10)
    assert (memories / "MEMORY.md").read_bytes() == before
    assert str(caught.value) == (
        "MEMORY.md would be 36/30 chars. Remove or shorten entries first; current entries:\n"
        "1) aaaaaaaaaa\n2) bbbbbbbbbb"
    )


def test_limit_applies_to_whole_file_length(memories: Path) -> None:
    store = MemoryStore(memories, memory_char_limit=2200, user_char_limit=23)
    store.add("user", "a" * 10)
    store.add("user", "b" * 10)  # 10 + len("\n§\n") + 10 == 23: exactly at the limit
    assert store.snapshot().text == "## USER.md [100% — 23/23 chars]\n" + "a" * 10 + "\n§\n" + "b" * 10


def test_limit_errors_are_memory_tool_errors() -> None:
    assert issubclass(MemoryLimitError, MemoryToolError)
    assert issubclass(MemoryEditError, MemoryToolError)


def test_replace_by_unique_substring(store: MemoryStore) -> None:
    store.add("memory", "Deploys run on Fridays")
    store.add("memory", "CI uses GitHub Actions")
    message = store.replace("memory", "Fridays", "Deploys run on Thursdays")
    assert store.entries("memory") == ["Deploys run on Thursdays", "CI uses GitHub Actions"]
    assert message.startswith("Replaced an entry in MEMORY.md [")


def test_replace_ambiguous_lists_entries(store: MemoryStore) -> None:
    store.add("memory", "Deploys run on Fridays")
    store.add("memory", "Backups run on Fridays")
    with pytest.raises(MemoryEditError) as caught:
        store.replace("memory", "Fridays", "x")
    message = str(caught.value)
    assert "matches 2 entries" in message
    assert "1) Deploys run on Fridays\n2) Backups run on Fridays" in message
    assert store.entries("memory") == ["Deploys run on Fridays", "Backups run on Fridays"]


def test_exact_entry_breaks_a_tie(store: MemoryStore) -> None:
    store.add("memory", "uv")
    store.add("memory", "uv is faster than pip")
    store.remove("memory", "uv")
    assert store.entries("memory") == ["uv is faster than pip"]


def test_replace_no_match_lists_entries(store: MemoryStore) -> None:
    store.add("user", "Name: Ada")
    with pytest.raises(MemoryEditError, match=r"(?s)No entry of USER\.md contains 'Bob'.*\n1\) Name: Ada"):
        store.replace("user", "Bob", "Name: Bob")


def test_replace_with_empty_content_points_to_remove(store: MemoryStore) -> None:
    store.add("user", "Name: Ada")
    with pytest.raises(MemoryEditError, match="use remove"):
        store.replace("user", "Ada", "  ")


def test_replace_over_limit_leaves_file_unchanged(memories: Path) -> None:
    store = MemoryStore(memories, memory_char_limit=20, user_char_limit=1375)
    store.add("memory", "short")
    with pytest.raises(MemoryLimitError, match=r"MEMORY\.md would be 25/20 chars"):
        store.replace("memory", "short", "x" * 25)
    assert store.entries("memory") == ["short"]


def test_remove(store: MemoryStore, memories: Path) -> None:
    store.add("memory", "one")
    store.add("memory", "two")
    assert store.remove("memory", "one") == "Removed an entry from MEMORY.md [0% — 3/2,200 chars]"
    store.remove("memory", "two")
    assert (memories / "MEMORY.md").read_text(encoding="utf-8") == ""
    with pytest.raises(MemoryEditError, match=r"\(none\)"):
        store.remove("memory", "two")


def test_empty_old_text_rejected(store: MemoryStore) -> None:
    store.add("memory", "one")
    with pytest.raises(MemoryEditError, match="old_text is empty"):
        store.remove("memory", " ")


def test_unknown_target_rejected(store: MemoryStore) -> None:
    with pytest.raises(MemoryEditError, match="Use 'memory'"):
        store.add("memories", "x")  # type: ignore[arg-type]


def test_atomic_write_leaves_no_temp_files(store: MemoryStore, memories: Path) -> None:
    for number in range(5):
        store.add("memory", f"fact {number}")
    store.replace("memory", "fact 0", "fact zero")
    store.remove("memory", "fact 1")
    store.add("user", "Name: Ada")
    assert sorted(path.name for path in memories.iterdir()) == [".lock", "MEMORY.md", "USER.md"]


def test_failed_write_keeps_old_file_and_cleans_up(
    store: MemoryStore, memories: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.add("memory", "old")

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("agent.memory.os.replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        store.add("memory", "new")
    monkeypatch.undo()
    assert store.entries("memory") == ["old"]
    assert sorted(path.name for path in memories.iterdir()) == [".lock", "MEMORY.md"]


def test_snapshot_both_files(memories: Path) -> None:
    store = MemoryStore(memories, 2200, 1375)
    assert store.snapshot().text == ""
    store.add("user", "Name: Ada")
    store.add("memory", "Project uses uv")
    store.add("memory", "Tests: pytest -q")
    assert store.snapshot().text == (
        "## MEMORY.md [1% — 34/2,200 chars]\nProject uses uv\n§\nTests: pytest -q\n\n"
        "## USER.md [0% — 9/1,375 chars]\nName: Ada"
    )


def test_snapshot_is_deterministic_for_hand_edited_files(memories: Path) -> None:
    memories.mkdir()
    (memories / "MEMORY.md").write_text("\n\nProject uses uv  \r\n§\nTests: pytest -q\n\n", encoding="utf-8")
    hand_edited = MemoryStore(memories, 2200, 1375).snapshot().text
    other = memories.parent / "other"
    clean = MemoryStore(other, 2200, 1375)
    clean.add("memory", "Project uses uv")
    clean.add("memory", "Tests: pytest -q")
    assert hand_edited == clean.snapshot().text


def test_non_utf8_file_gives_actionable_error(memories: Path) -> None:
    memories.mkdir()
    (memories / "USER.md").write_bytes(b"caf\xe9")
    with pytest.raises(MemoryToolError, match="Fix or delete the file"):
        MemoryStore(memories, 2200, 1375).entries("user")


def test_limits_must_be_positive(memories: Path) -> None:
    with pytest.raises(ValueError, match="user_char_limit"):
        MemoryStore(memories, memory_char_limit=2200, user_char_limit=0)
