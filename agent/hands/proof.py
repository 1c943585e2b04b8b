"""Proving a command harmless: the only way a command runs without the owner's yes.

The approval rules (``agent.hands.rules``) name what is dangerous, and a list of dangers always misses
one. So the decision is turned around: :meth:`Prover.problem` reads the command with a real bash grammar
(tree-sitter's) and accepts it only when *everything* in it is understood and harmless:

- the line is made only of simple commands joined by ``;``, ``&&``, ``||``, ``|`` and newlines
  (functions, loops, ``[[ ]]``, subshells, assignments and background jobs are not proven);
- every word is literal: quotes and escapes are read, but any expansion (``$x``, ``$(...)``, backticks,
  ``~``, ``{a,b}``, ``$'...'``) is not proven, and a glob is proven only by what it matches now;
- every command is on ``tools.safe_commands`` (the built-in read-only commands by default, e.g. ``ls``,
  ``cat``, ``git status``, plus the owner's own prefixes such as ``npm test``), without the options of
  :data:`REFUSED` that would write, run a program or follow links out;
- every argument, read as a path, stays inside the workspace and ``tools.allowed_paths`` (links
  resolved), is none of Herald's own files, and is no file with a second name (a hard link);
- redirections only read such paths, write to ``/dev/null`` or join descriptors (``2>&1``); a
  here-document's text expands nothing.

Whatever is not proven is held and the rules explain why. Pure but for reading the file system (links,
globs, link counts).
"""

from __future__ import annotations

import glob
import os
import shlex
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

from agent.hands.paths import Confinement, inside
from agent.settings import DEFAULT_SAFE_COMMANDS

BASH = Language(tree_sitter_bash.language())

BUILTIN_SAFE = DEFAULT_SAFE_COMMANDS  # the built-in read-only commands: they read and list, nothing more
# Options of the built-in commands that write, run a program, or read beyond the paths given.
REFUSED: dict[str, frozenset[str]] = {
    "sort": frozenset(
        {"-o", "--output", "--compress-program", "-T", "--temporary-directory", "--files0-from"}
    ),
    "wc": frozenset({"--files0-from"}),
    "du": frozenset({"--files0-from"}),
    "file": frozenset({"-C", "--compile", "-f", "--files-from"}),
    "grep": frozenset({"-R", "--dereference-recursive"}),
    "egrep": frozenset({"-R", "--dereference-recursive"}),
    "fgrep": frozenset({"-R", "--dereference-recursive"}),
    "rg": frozenset({"--pre", "-L", "--follow", "-z", "--search-zip", "--hostname-bin"}),
    "diff": frozenset({"-r", "--recursive"}),
    "tree": frozenset({"-o", "-l", "-R"}),
    "printf": frozenset({"-v"}),
    "date": frozenset({"-s", "--set"}),
    "git diff": frozenset({"--output", "--ext-diff", "--textconv"}),
    "git log": frozenset({"--output", "--ext-diff", "--textconv"}),
    "git show": frozenset({"--output", "--ext-diff", "--textconv"}),
    "git blame": frozenset({"--textconv", "--contents"}),
}
RECURSIVE = frozenset({"grep", "egrep", "fgrep", "rg"})  # read whole folders (grep with -r)
WALK_LIMIT = 20_000  # entries a recursive read's folders are checked for hard links; beyond: not proven
# Keys a repository's own configuration may hold for a git command to be proven harmless; any other key
# may name a program git runs (core.fsmonitor, core.pager, diff.*.textconv, filter.*.clean, include...).
GIT_KEYS = frozenset(
    {
        "core.repositoryformatversion", "core.filemode", "core.bare", "core.logallrefupdates",
        "core.ignorecase", "core.precomposeunicode", "core.symlinks", "core.autocrlf", "core.eol",
        "remote.url", "remote.fetch", "remote.pushurl", "branch.remote", "branch.merge", "branch.rebase",
        "user.name", "user.email", "init.defaultbranch", "pull.rebase", "extensions.objectformat",
        "extensions.worktreeconfig",
    }
)  # fmt: skip
ONE_FILE = frozenset({"uniq", "xxd"})  # a second file operand is written
NOT_PATHS = frozenset({"echo", "printf", "exit"})  # their words are text, not files
READABLE_DEVICES = frozenset({"/dev/null", "/dev/zero", "/dev/urandom", "/dev/random", "/dev/stdin"})
JOINS = frozenset({";", "&&", "||", "|", "|&", "\n"})
GLOB = frozenset("*?[")


class NotProven(Exception):
    """What keeps a command from being proven harmless, in a few words."""

    def __init__(self, why: str, *, opaque: bool = False) -> None:
        super().__init__(why)
        self.opaque = opaque  # bash decides something only when it runs: it cannot be read for sure


@dataclass(frozen=True)
class Unproven:
    why: str
    opaque: bool  # cannot be read for sure (an expansion, text the grammar cannot read)


@dataclass(frozen=True)
class Literal:
    text: str
    glob: bool = False  # has an unquoted * ? [ : bash replaces it with the names it matches


@dataclass
class _Reading:
    cwds: list[Path]  # every folder the command may be in by now (a cd may fail)
    names: list[str] = field(default_factory=list)


class Prover:
    """Decides whether a command line is proven harmless under ``safe`` (tools.safe_commands)."""

    def __init__(self, safe: Sequence[str], confinement: Confinement, herald_home: Path | None) -> None:
        self.safe = sorted((tuple(shlex.split(entry)) for entry in safe), key=len, reverse=True)
        self.confinement = confinement  # where it may read: the workspace and tools.allowed_paths
        self.herald_home = herald_home  # real; Herald's own files (but the workspace): never proven
        self.parser = Parser(BASH)

    def problem(self, command: str) -> Unproven | None:
        """None when ``command`` is proven harmless; else why not (shown to the owner)."""
        tree = self.parser.parse(command.encode())
        if tree.root_node.has_error:
            return Unproven("the shell grammar cannot read it", opaque=True)
        try:
            self._statements(tree.root_node, _Reading([self.confinement.workspace]))
        except NotProven as why:
            return Unproven(str(why), why.opaque)
        return None

    # --- structure ----------------------------------------------------------------------------------

    def _statements(self, node: Node, reading: _Reading) -> None:
        for child in node.children:
            if not child.is_named:
                if child.type not in JOINS:
                    raise NotProven(f"'{_text(child)}' is not proven harmless")
                continue
            self._statement(child, reading)

    def _statement(self, node: Node, reading: _Reading) -> None:
        if node.type == "comment":
            return
        if node.type in ("list", "pipeline"):
            self._statements(node, reading)
        elif node.type == "redirected_statement":
            body = node.child_by_field_name("body")
            for child in node.children:
                if child == body:
                    self._statement(child, reading)
                else:
                    self._redirect(child, reading)
        elif node.type == "command":
            self._command(node, reading)
        else:
            raise NotProven(f"{node.type.replace('_', ' ')} is not proven harmless")

    def _command(self, node: Node, reading: _Reading) -> None:
        words: list[Literal] = []
        for child in node.children:
            if child.type == "command_name":
                words.append(_literal(child.children[0] if child.child_count == 1 else child))
            elif child.type in ("file_redirect", "herestring_redirect"):
                self._redirect(child, reading)
            elif child.type == "variable_assignment":
                raise NotProven(f"it sets a variable ({_text(child)})")
            else:
                words.append(_literal(child))
        if not words:
            raise NotProven("it runs no command")
        argv = [word.text for word in words]
        if words[0].glob:
            raise NotProven(f"a pattern decides which command runs ({argv[0]})", opaque=True)
        entry = next((e for e in self.safe if tuple(argv[: len(e)]) == e), None)
        if entry is None:
            raise NotProven(f"'{argv[0]}' is not on tools.safe_commands")
        name = " ".join(entry)
        reading.names.append(name)
        self._arguments(name, words[len(entry) :], reading)

    def _arguments(self, name: str, args: list[Literal], reading: _Reading) -> None:
        refused = REFUSED.get(name, frozenset())
        options_end = False
        files = 0
        folders: list[Path] = []
        for word in args:
            text = word.text
            if not options_end and text == "--":
                options_end = True
                continue
            if not options_end and text.startswith("-") and text != "-":
                _option(name, text, refused)
                if name in NOT_PATHS:
                    continue
                if "=" in text:
                    self._path(text.partition("=")[2], word.glob, reading)
                elif not text.startswith("--") and "/" in text:
                    self._path(text[2:], word.glob, reading)  # a value joined to its option: -f../x
                continue
            files += 1
            if name in ONE_FILE and files > 1:
                raise NotProven(f"{name} writes its second file ({text})")
            if name not in NOT_PATHS:
                self._path(text, word.glob, reading)
                folders += [p for cwd in reading.cwds for p in _expanded(text, word.glob, cwd) if p.is_dir()]
        if name == "cd":
            self._cd(args, reading)
        if name.startswith("git "):
            for cwd in reading.cwds:
                _plain_git_config(cwd)
        if name in RECURSIVE and (name == "rg" or _recursive_grep(args)):
            _no_hard_links(folders or reading.cwds)

    def _cd(self, args: list[Literal], reading: _Reading) -> None:
        targets = [word for word in args if not word.text.startswith("-")]
        if len(targets) != 1 or targets[0].glob:
            raise NotProven("cd without one plain folder goes home or elsewhere")
        for cwd in list(reading.cwds):
            reading.cwds.append(Path(os.path.realpath(cwd / targets[0].text)))

    def _redirect(self, node: Node, reading: _Reading) -> None:
        if node.type == "heredoc_redirect":
            quoted = False
            for child in node.children:
                if child.type == "heredoc_start":
                    quoted = _text(child)[:1] in ("'", '"') or "\\" in _text(child)
                elif child.type == "heredoc_body":
                    if not quoted and any(char in _text(child) for char in "$`\\"):
                        raise NotProven("its here-document expands text", opaque=True)
                elif child.type not in ("<<", "<<-", "heredoc_end"):
                    raise NotProven(f"{child.type.replace('_', ' ')} after a here-document")
            return
        if node.type == "herestring_redirect":
            _literal(node.children[-1])
            return
        if node.type != "file_redirect":
            raise NotProven(f"{node.type.replace('_', ' ')} is not proven harmless")
        operator = next(child.type for child in node.children if not child.is_named)
        target = _literal(node.child_by_field_name("destination") or node.children[-1])
        if operator in (">&", "<&") and (target.text.isdigit() or target.text == "-"):
            return  # joins descriptors: 2>&1
        if operator == "<":
            self._path(target.text, target.glob, reading)
            return
        if target.text != "/dev/null" or target.glob:
            raise NotProven(f"it writes a file ({_text(node)})")

    # --- paths ----------------------------------------------------------------------------------------

    def _path(self, text: str, globbed: bool, reading: _Reading) -> None:
        """``text`` as a file the command reads: inside the allowed folders, not Herald's, one name."""
        if text in ("-", "") or text in READABLE_DEVICES:
            return
        for cwd in reading.cwds:
            for path in _expanded(text, globbed, cwd):
                real = Path(os.path.realpath(path))
                if not self.confinement.contains(real):
                    raise NotProven(f"it reads outside the workspace and tools.allowed_paths ({text})")
                home, workspace = self.herald_home, self.confinement.workspace
                if home is not None and inside(real, home) and not inside(real, workspace):
                    raise NotProven(f"it reads Herald's own files ({text})")
                if real.is_file() and real.stat().st_nlink > 1:
                    raise NotProven(f"{text} has another name (a hard link) that may be a secret's")


def _expanded(text: str, globbed: bool, cwd: Path) -> Iterator[Path]:
    """The paths bash would pass for ``text`` in ``cwd``: a glob's matches (itself when none match)."""
    if globbed and any(part.startswith(".") and GLOB & set(part) for part in text.split("/")):
        raise NotProven(f"a pattern for hidden names may match '..' in older bash ({text})")
    yield cwd / text
    if globbed:
        pattern = text if text.startswith("/") else str(cwd / text)
        for match in glob.glob(pattern):
            yield Path(match)


def _plain_git_config(cwd: Path) -> None:
    """The repository ``cwd`` is in names no program in its own configuration (the model may write it)."""
    for folder in (cwd, *cwd.parents):
        dot_git = folder / ".git"
        if not dot_git.exists() and not dot_git.is_symlink():
            continue
        if not dot_git.is_dir() or dot_git.is_symlink():
            raise NotProven("its repository's .git is elsewhere (a file or a link)")
        for config in (dot_git / "config", dot_git / "config.worktree"):
            if config.exists():
                _known_git_keys(config)
        return


def _known_git_keys(config: Path) -> None:
    section = ""
    for raw in config.read_text(errors="replace").splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line[1:].split("]", 1)[0].split(" ", 1)[0].split(".", 1)[0].strip().lower()
            if "]" in line.split("]", 1)[1]:
                raise NotProven("its repository's configuration cannot be read for sure")
            continue
        key = f"{section}.{line.split('=', 1)[0].strip().lower()}"
        if key not in GIT_KEYS:
            raise NotProven(f"its repository's configuration sets {key}, which may run a program")


def _recursive_grep(args: list[Literal]) -> bool:
    options = [word.text for word in args if word.text.startswith("-")]
    short = "".join(text[1:] for text in options if not text.startswith("--"))
    recursive = "--recursive" in options or any(text.startswith("--directories") for text in options)
    return "r" in short or recursive


def _no_hard_links(folders: Sequence[Path]) -> None:
    """A recursive read must not reach a file with a second name: it may be a link to Herald's keys."""
    seen = 0
    for folder in folders:
        for root, _, names in os.walk(folder):
            seen += len(names) + 1
            if seen > WALK_LIMIT:
                raise NotProven(f"it reads more than {WALK_LIMIT} files, too many to check for hard links")
            for name in names:
                path = Path(root, name)
                if not path.is_symlink() and path.is_file() and path.stat().st_nlink > 1:
                    raise NotProven(f"it reads {path.name}, which has another name (a hard link)")


def _option(name: str, text: str, refused: frozenset[str]) -> None:
    if text.startswith("--"):
        if text.partition("=")[0] in refused:
            raise NotProven(f"{name} {text.partition('=')[0]} writes, runs a program or reads further")
        return
    letters = {f"-{letter}" for letter in text[1:]}
    if letters & refused:
        raise NotProven(f"{name} {text} writes, runs a program or reads further")


def _literal(node: Node) -> Literal:
    """The word ``node`` as the command receives it; NotProven when bash expands anything in it."""
    kind = node.type
    if kind == "raw_string":
        return Literal(_text(node)[1:-1])
    if kind == "string":
        parts = [child for child in node.children if child.is_named]
        if any(child.type != "string_content" for child in parts):
            raise NotProven(f"a value only known when it runs ({_text(node)})", opaque=True)
        return Literal(_unescape_quoted("".join(_text(child) for child in parts)))
    if kind == "concatenation":
        pieces = [_literal(child) for child in node.children]
        return Literal("".join(p.text for p in pieces), any(p.glob for p in pieces))
    if kind in ("word", "number"):
        return _bare(_text(node))
    raise NotProven(f"a value only known when it runs ({_text(node)})", opaque=True)


def _bare(text: str) -> Literal:
    """An unquoted word: escapes removed; expansions bash would do are not proven."""
    out: list[str] = []
    globbed = False
    chars = iter(enumerate(text))
    for position, char in chars:
        if char == "\\":
            escaped = next(chars, None)
            if escaped is not None and escaped[1] != "\n":
                out.append(escaped[1])
            continue
        if char in "$`{}" or (char == "~" and (position == 0 or text[position - 1] in "=:")):
            raise NotProven(f"a value only known when it runs ({text})", opaque=True)
        globbed = globbed or char in GLOB
        out.append(char)
    return Literal("".join(out), globbed)


def _unescape_quoted(text: str) -> str:
    if "$" in text or "`" in text:
        raise NotProven(f"a value only known when it runs ({text})", opaque=True)
    out: list[str] = []
    position = 0
    while position < len(text):
        char = text[position]
        if char == "\\" and position + 1 < len(text) and text[position + 1] in '"\\\n':
            if text[position + 1] != "\n":
                out.append(text[position + 1])
            position += 2
            continue
        out.append(char)
        position += 1
    return "".join(out)


def _text(node: Node) -> str:
    return (node.text or b"").decode(errors="replace")
