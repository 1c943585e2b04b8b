"""The README is checked against the code where it can be: its command lines parse, its links land."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_herald_chat_line_of_the_readme_is_accepted() -> None:
    """The README's examples are real command lines (TEXT stands for a message)."""
    from gateway.cli.grammar import build_parser, one_shot_text

    lines = {" ".join(found.split()) for found in re.findall(r"`(herald chat\b[^`]*)`", README)}
    assert 'herald chat -q --continue "TEXT"' in lines
    for line in sorted(lines):
        args = build_parser().parse_args(shlex.split(line)[1:])  # a usage error exits: the test fails
        one_shot_text(args.query, args.text)  # raises on a usage error


def test_every_link_within_the_readme_lands_on_a_heading() -> None:
    headings = {anchor(line.lstrip("#")) for line in README.splitlines() if line.startswith("#")}
    links = set(re.findall(r"\]\(#([^)]+)\)", README))
    assert "photos-voice-notes-and-files" in links and "several-processes-cluster" in links
    assert sorted(links - headings) == []
