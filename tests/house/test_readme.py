"""The README and the pages of docs/ are checked against the code where they can be: their command
lines parse, the settings they set exist, their links land (on a file, and on a heading of it)."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from gateway.cli.grammar import build_parser, one_shot_text
from gateway.config import ConfigError, set_value

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
METASYNTAX = re.compile(r"[|\[\]…<>]|\.\.\.|&&")  # a synopsis (`herald memory list|show`), not a command line
PLACEHOLDER = re.compile(r"^[A-Z][A-Z_]{2,}$")  # NAME, PORT, COMMAND: stands for what the reader types


def text(page: Path) -> str:
    return page.read_text(encoding="utf-8")


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def prose(page: Path) -> list[str]:
    """The page's lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in text(page).splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def headings(page: Path) -> set[str]:
    return {anchor(line.lstrip("#")) for line in prose(page) if line.startswith("#")}


def code_lines(page: Path) -> list[str]:
    """Every `herald ...` of the page: inline code spans, and lines of its shell code blocks (also those
    indented in a list)."""
    found = [" ".join(span.split()) for span in re.findall(r"`(herald [^`]*)`", text(page))]
    for block in re.findall(r"^ *```(?:sh|bash|console)\n(.*?)^ *```", text(page), flags=re.M | re.S):
        for line in block.splitlines():
            command = line.split("  #")[0].strip().removeprefix("$ ")
            found += [part.strip() for part in command.split("&&") if part.strip().startswith("herald ")]
    return found


def usage_error(line: str) -> str | None:
    """What argparse says about ``line`` (None: it parses)."""
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        try:
            build_parser().parse_args(shlex.split(line)[1:])
        except SystemExit as exit_:
            return None if exit_.code == 0 else stderr.getvalue().strip().splitlines()[-1]
    return None


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_herald_command_line_of_the_page_is_accepted(page: Path) -> None:
    """A command line a reader copies is one the CLI takes. A bare mention of a command (`herald cron`,
    `herald config set` in prose: no options) may leave out its arguments, and a word in capitals
    stands for what the reader types; anything else argparse refuses (an unknown command or option, a
    missing argument beside options) is a doc error."""
    wrong = []
    for line in sorted(set(code_lines(page))):
        if METASYNTAX.search(line):
            continue
        error = usage_error(line)
        if error is None:
            continue
        mention = not any(word.startswith("-") for word in shlex.split(line)[1:]) or error.endswith(
            "required: command"  # `herald --bot NAME`, `herald -v`: an option of every command
        )
        if mention and "the following arguments are required" in error:
            continue
        quoted = re.findall(r"'([^']*)'", error)
        if quoted and all(PLACEHOLDER.match(value) for value in quoted[:1]):
            continue
        wrong.append(f"{line}: {error}")
    assert wrong == []


def test_every_herald_chat_line_is_a_message_or_a_chat() -> None:
    """The chat examples are real command lines (TEXT stands for a message)."""
    lines = {line for page in PAGES for line in code_lines(page) if re.match(r"herald chat\b", line)}
    assert 'herald chat -q --continue "TEXT"' in lines
    for line in sorted(lines):
        if METASYNTAX.search(line) or line.endswith(" -q"):  # `herald chat -q` names the option
            continue
        args = build_parser().parse_args(shlex.split(line)[1:])  # a usage error exits: the test fails
        one_shot_text(args.query, args.text)  # raises on a usage error


def test_every_config_set_line_names_a_setting_and_a_value_it_takes(tmp_path: Path) -> None:
    """`herald config set KEY VALUE` in the pages runs through the same validation as the command."""
    checked = 0
    problems = []
    for page in PAGES:
        for line in code_lines(page):
            words = shlex.split(line) if not METASYNTAX.search(line) else []
            if words[1:3] != ["config", "set"] or len(words) != 5 or words[3] == "KEY":
                continue
            config = tmp_path / f"config-{checked}.yaml"
            checked += 1
            try:
                set_value(config, words[3], words[4])
            except ConfigError as exc:
                problems.append(f"{page.name}: {line}: {exc}")
    assert checked >= 5 and problems == []


def test_every_link_lands_on_a_file_and_a_heading() -> None:
    """Links between the README and docs/ (and into the repository) resolve, #anchors included."""
    broken = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", "\n".join(prose(page))):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            path, _, fragment = target.partition("#")
            landing = (page.parent / path).resolve() if path else page
            if not landing.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif fragment and landing.suffix == ".md" and fragment not in headings(landing):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert broken == []


def test_the_readme_starts_with_the_two_set_up_commands() -> None:
    """The first code block is the whole set-up: install and chat, then the test suite."""
    block = re.search(r"^```sh\n(.*?)^```", text(ROOT / "README.md"), flags=re.M | re.S)
    assert block is not None
    commands = [line.split("  #")[0].strip() for line in block.group(1).splitlines()]
    assert len(commands) == 2
    assert commands[0].endswith("pip install -e . && herald chat")
    assert commands[1] == "./scripts/test" and (ROOT / "scripts" / "test").stat().st_mode & 0o111
