"""The download names the browser saves under (``agent.tools.browser.downloads``): pure functions, no
browser. tests/web/test_browser_tools.py downloads through Chromium; Chromium may clean a name before Herald
sees it, so the rule is checked here on the raw names too."""

from __future__ import annotations

from agent.hands.downloads import numbered, safe_name
from tests.fakes.site import HOSTILE_NAMES


def test_a_suggested_name_keeps_only_safe_characters() -> None:
    names = [*HOSTILE_NAMES, "..", "a/../../b\\c.pdf", "\u202egnp.exe", "Bird list 2026.csv", "Ünïcode.txt"]
    assert [safe_name(name) for name in names] == [
        "passwd",
        "bashrc",
        "notes_rm_-rf.txt",
        "download",
        "c.pdf",
        "gnp.exe",
        "Bird_list_2026.csv",
        "Ünïcode.txt",
    ]


def test_a_long_name_is_cut_keeping_its_extension() -> None:
    cut = safe_name("a" * 500 + ".tar")
    assert cut.endswith("a.tar") and len(cut) == 120


def test_a_clash_gets_a_number_before_the_extension() -> None:
    assert [numbered("report.pdf", 2), numbered("README", 3)] == ["report-2.pdf", "README-3"]
