"""Skills index (deterministic, forgiving of broken files) and confined reading of skill files."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from agent.skills import (
    SkillError,
    SkillInfo,
    format_skills_index,
    load_skills_index,
    read_skill,
)


def _skill(skills: Path, folder: str, front: str, body: str = "Do the thing.\n") -> Path:
    directory = skills / folder
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "SKILL.md").write_text(f"---\n{front}\n---\n{body}", encoding="utf-8")
    return directory


@pytest.fixture()
def skills(tmp_path: Path) -> Path:
    root = tmp_path / "skills"
    _skill(root, "devops/deploy", "name: deploy\ndescription: Deploy the app to production")
    _skill(root, "devops/rollback", "name: rollback\ndescription: Undo a bad deploy")
    _skill(root, "notes", "name: notes\ndescription: Take meeting notes")
    _skill(root, "misc/pdf", "name: pdf\ndescription: Fill PDF forms\ncategory: documents")
    return root


def test_index_sorted_by_category_then_name(skills: Path) -> None:
    index = load_skills_index(skills)
    assert [(s.category, s.name) for s in index] == [
        ("devops", "deploy"),
        ("devops", "rollback"),
        ("documents", "pdf"),
        ("general", "notes"),
    ]
    assert index[0] == SkillInfo(
        name="deploy",
        description="Deploy the app to production",
        category="devops",
        directory=skills / "devops" / "deploy",
    )


def test_missing_skills_dir_gives_empty_index(tmp_path: Path) -> None:
    assert load_skills_index(tmp_path / "nope") == []
    assert format_skills_index([]) == ""


def test_formatted_index(skills: Path) -> None:
    text = format_skills_index(load_skills_index(skills))
    assert text.startswith("# Skills\n\n")
    assert "skill_view" in text
    assert text.endswith(
        "## devops\n- deploy: Deploy the app to production\n- rollback: Undo a bad deploy\n\n"
        "## documents\n- pdf: Fill PDF forms\n\n"
        "## general\n- notes: Take meeting notes"
    )


def test_formatted_index_is_deterministic_and_machine_independent(skills: Path, tmp_path: Path) -> None:
    index = load_skills_index(skills)
    assert format_skills_index(index) == format_skills_index(list(reversed(index)))
    assert str(tmp_path) not in format_skills_index(index)


def test_multiline_description_stays_on_one_line(tmp_path: Path) -> None:
    _skill(tmp_path, "a", "name: a\ndescription: |\n  first line\n  second line")
    assert format_skills_index(load_skills_index(tmp_path)).endswith("- a: first line second line")


def test_broken_skills_are_skipped_with_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _skill(tmp_path, "good", "name: good\ndescription: fine")
    _skill(tmp_path, "noname", "description: has no name")
    _skill(tmp_path, "badyaml", "name: [unclosed")
    _skill(tmp_path, "list", "- just\n- a list")
    (tmp_path / "nofront").mkdir()
    (tmp_path / "nofront" / "SKILL.md").write_text("# Just a body\n", encoding="utf-8")
    (tmp_path / "unclosed").mkdir()
    (tmp_path / "unclosed" / "SKILL.md").write_text("---\nname: x\n", encoding="utf-8")
    (tmp_path / "binary").mkdir()
    (tmp_path / "binary" / "SKILL.md").write_bytes(b"---\nname: \xff\n---\n")
    with caplog.at_level(logging.WARNING, logger="agent.skills"):
        index = load_skills_index(tmp_path)
    assert [s.name for s in index] == ["good"]
    warned = " ".join(record.getMessage() for record in caplog.records)
    for folder in ("noname", "badyaml", "list", "nofront", "unclosed", "binary"):
        assert str(tmp_path / folder / "SKILL.md") in warned
    assert "no 'name'" in warned


def test_duplicate_name_first_in_path_order_wins(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _skill(tmp_path, "b/deploy", "name: deploy\ndescription: second")
    _skill(tmp_path, "a/deploy", "name: deploy\ndescription: first")
    with caplog.at_level(logging.WARNING, logger="agent.skills"):
        index = load_skills_index(tmp_path)
    assert [(s.name, s.description) for s in index] == [("deploy", "first")]
    assert "already used" in caplog.text


def test_hidden_folders_are_not_scanned(tmp_path: Path) -> None:
    _skill(tmp_path, ".git/x", "name: x")
    assert load_skills_index(tmp_path) == []


def test_read_skill_body_and_file_list(skills: Path) -> None:
    deploy = skills / "devops" / "deploy"
    (deploy / "references").mkdir()
    (deploy / "references" / "api.md").write_text("API notes", encoding="utf-8")
    (deploy / "scripts").mkdir()
    (deploy / "scripts" / "run.sh").write_text("echo hi", encoding="utf-8")
    text = read_skill(skills, "deploy")
    assert "name: deploy" not in text
    assert text.startswith("Do the thing.\n\nFiles in this skill")
    assert text.endswith("\n- references/api.md\n- scripts/run.sh")


def test_read_skill_without_extra_files_is_just_the_body(skills: Path) -> None:
    assert read_skill(skills, "notes") == "Do the thing."


def test_read_skill_file(skills: Path) -> None:
    deploy = skills / "devops" / "deploy"
    (deploy / "references").mkdir()
    (deploy / "references" / "api.md").write_text("API notes\n", encoding="utf-8")
    assert read_skill(skills, "deploy", "references/api.md") == "API notes\n"


def test_unknown_skill_lists_available_names(skills: Path) -> None:
    with pytest.raises(SkillError, match="Available skills: deploy, notes, pdf, rollback"):
        read_skill(skills, "deplyo")


def test_unknown_skill_with_no_skills_installed(tmp_path: Path) -> None:
    with pytest.raises(SkillError, match="no skills are installed"):
        read_skill(tmp_path, "deploy")


def test_missing_file_lists_files(skills: Path) -> None:
    (skills / "devops" / "deploy" / "guide.md").write_text("guide", encoding="utf-8")
    with pytest.raises(SkillError, match=r"no file 'nope\.md'\. Its files: guide\.md"):
        read_skill(skills, "deploy", "nope.md")


@pytest.mark.parametrize("path", ["../../etc/passwd", "../rollback/SKILL.md", "a/../../x", "..\\..\\x"])
def test_dotdot_escape_rejected(skills: Path, path: str) -> None:
    with pytest.raises(SkillError, match=r"'\.\.' is not allowed"):
        read_skill(skills, "deploy", path)


@pytest.mark.parametrize("path", ["/etc/passwd", "~/.ssh/id_rsa", "C:\\Windows\\win.ini"])
def test_absolute_path_rejected(skills: Path, path: str) -> None:
    with pytest.raises(SkillError, match="is absolute"):
        read_skill(skills, "deploy", path)


def test_symlink_escape_rejected(skills: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret", encoding="utf-8")
    (skills / "devops" / "deploy" / "link.txt").symlink_to(secret)
    (skills / "devops" / "deploy" / "linkdir").symlink_to(tmp_path, target_is_directory=True)
    for path in ("link.txt", "linkdir/secret.txt"):
        with pytest.raises(SkillError, match="outside the folder"):
            read_skill(skills, "deploy", path)
    assert "link.txt" not in read_skill(skills, "deploy")


def test_symlink_inside_skill_is_allowed(skills: Path) -> None:
    deploy = skills / "devops" / "deploy"
    (deploy / "real.md").write_text("real", encoding="utf-8")
    (deploy / "alias.md").symlink_to(deploy / "real.md")
    assert read_skill(skills, "deploy", "alias.md") == "real"


def test_binary_file_rejected(skills: Path) -> None:
    (skills / "devops" / "deploy" / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    with pytest.raises(SkillError, match="binary"):
        read_skill(skills, "deploy", "logo.png")


def test_large_file_rejected(skills: Path) -> None:
    (skills / "devops" / "deploy" / "big.txt").write_text("x" * (100 * 1024 + 1), encoding="utf-8")
    (skills / "devops" / "deploy" / "ok.txt").write_text("x" * (100 * 1024), encoding="utf-8")
    with pytest.raises(SkillError, match="101 KB, over the 100 KB limit"):
        read_skill(skills, "deploy", "big.txt")
    assert len(read_skill(skills, "deploy", "ok.txt")) == 100 * 1024


def test_directory_path_rejected(skills: Path) -> None:
    (skills / "devops" / "deploy" / "references").mkdir()
    with pytest.raises(SkillError, match="no file 'references'"):
        read_skill(skills, "deploy", "references")


def test_empty_path_rejected(skills: Path) -> None:
    with pytest.raises(SkillError, match="empty"):
        read_skill(skills, "deploy", "")
