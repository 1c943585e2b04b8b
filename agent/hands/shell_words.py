"""Reading a shell command the way bash will: words, quotes, pipelines, redirections, substitutions.

The approval rules (``agent.hands.rules``) judge what a command *does*, so they need what bash will
execute, not the text as typed: ``r""m``, ``\\rm`` and ``$'\\x72\\x6d'`` all run ``rm``; ``a; b``,
``a && b``, a pipeline, a subshell and ``$(...)`` each run commands of their own; ``> file`` writes a
file whatever the command. This module turns command text into that structure (:func:`parse`):

- a :class:`Word` is one argument with its quotes removed; ``literal`` is False when bash will expand
  something in it at run time (``$VAR``, ``$(...)``, a backtick, ``${...}``), so nobody can know from
  the text what it will be;
- a :class:`Command` is one simple command: its words (variable assignments before it set apart),
  its redirections (a here-document keeps its text), and whether its input is piped from the previous;
- a :class:`Script` is the pipelines in order, and every command or process substitution found in it,
  each a script of its own (they run too).

What cannot be read with certainty (an unclosed quote or substitution, a redirection without a
target) raises :class:`Unreadable`: the rules then hold the command rather than guess. It is a reader
for judging, not a shell: arithmetic, globbing and aliases are not evaluated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

RESERVED = frozenset(
    {"if", "then", "elif", "else", "fi", "do", "done", "while", "until", "!", "{", "}", "time", "coproc"}
)
HEADERS = frozenset({"for", "select", "case", "function", "[[", "]]", "esac", "in"})  # not commands
SEPARATORS = frozenset({";", "&", "&&", "||", "\n", ";;", ";&", ";;&", "(", ")"})
PIPES = frozenset({"|", "|&"})
WRITES = frozenset({">", ">>", ">|", "&>", "&>>", "<>"})
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=")
SPECIAL_PARAMETERS = frozenset("@*#?$!-0123456789")
ANSI_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "e": "\x1b",
    "E": "\x1b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "?": "?",
}


class Unreadable(Exception):
    """The command cannot be read with certainty; the message says what is wrong, in a few words."""


@dataclass(frozen=True)
class Word:
    text: str  # quotes removed; what bash expands is kept as written ("$HOME/x")
    literal: bool = True  # bash expands nothing in it: ``text`` is exactly what the command gets
    braces: bool = False  # an unquoted {a,b} brace expansion: bash makes several words of it


@dataclass(frozen=True)
class Redirect:
    op: str  # > >> >| &> &>> <> < << <<- <<< >& <&
    target: Word
    body: str | None = None  # a here-document's or here-string's text

    @property
    def writes(self) -> bool:
        """Whether it writes a file (``>&2`` duplicates a descriptor; ``>&file`` writes the file)."""
        if self.op == ">&":
            return not (self.target.text.isdigit() or self.target.text == "-")
        return self.op in WRITES


@dataclass(frozen=True)
class Command:
    words: tuple[Word, ...]
    assignments: tuple[Word, ...] = ()
    redirects: tuple[Redirect, ...] = ()
    piped: bool = False  # its standard input is the previous command's output

    @property
    def name(self) -> Word | None:
        return self.words[0] if self.words else None


Pipeline = tuple[Command, ...]


@dataclass(frozen=True)
class Script:
    pipelines: tuple[Pipeline, ...]
    substitutions: tuple[Script, ...] = ()

    def commands(self) -> list[Command]:
        """Every simple command, its substitutions' included (they run as well)."""
        found = [command for pipeline in self.pipelines for command in pipeline]
        for nested in self.substitutions:
            found.extend(nested.commands())
        return found


def parse(text: str) -> Script:
    """The structure of the shell command ``text``; raises :class:`Unreadable`."""
    lexer = _Lexer(text)
    tokens = lexer.tokens()
    return _Parser(tokens, tuple(lexer.substitutions)).script()


# --- tokens ------------------------------------------------------------------------------------------


@dataclass
class _HereDocument:
    op: str
    body: str | None = None


@dataclass(frozen=True)
class _Op:
    text: str


@dataclass(frozen=True)
class _Redir:
    op: str
    here: _HereDocument | None = None


_Token = Word | _Op | _Redir


@dataclass
class _WordBuilder:
    text: list[str] = field(default_factory=list)
    started: bool = False  # something was read (an empty quoted string "" is a word)
    literal: bool = True
    unquoted: list[str] = field(default_factory=list)  # the unquoted characters, for brace expansion

    def add(self, text: str, *, quoted: bool, literal: bool = True) -> None:
        self.text.append(text)
        self.started = True
        self.literal = self.literal and literal
        if not quoted:
            self.unquoted.append(text)

    def word(self) -> Word:
        unquoted = "".join(self.unquoted)
        braces = "{" in unquoted and "}" in unquoted and "," in unquoted
        return Word("".join(self.text), self.literal, braces)


class _Lexer:
    """Tokens of one command text (or of a substitution's, up to its closing parenthesis)."""

    def __init__(self, text: str, start: int = 0, *, closing: bool = False) -> None:
        self.text = text
        self.pos = start
        self.closing = closing  # a $( ... ): stop at the unmatched ")"
        self.substitutions: list[Script] = []
        self.pending_here: list[tuple[_HereDocument, str, bool]] = []  # (document, delimiter, strip tabs)
        self._here_next: _HereDocument | None = None  # the next word is a here-document's delimiter

    def tokens(self) -> list[_Token]:
        out: list[_Token] = []
        depth = 0
        word = _WordBuilder()

        def end_word() -> None:
            nonlocal word
            if word.started:
                finished = word.word()
                if self._here_next is not None:
                    self._register_here(finished)
                out.append(finished)
            word = _WordBuilder()

        text = self.text
        while self.pos < len(text):
            char = text[self.pos]
            if char in " \t":
                end_word()
                self.pos += 1
            elif char == "\n":
                end_word()
                out.append(_Op("\n"))
                self.pos += 1
                self._read_here_documents()
            elif char == "#" and not word.started:
                end = text.find("\n", self.pos)
                self.pos = len(text) if end == -1 else end
            elif char == "\\":
                self._backslash(word)
            elif char == "'":
                end = text.find("'", self.pos + 1)
                if end == -1:
                    raise Unreadable("a single quote is not closed")
                word.add(text[self.pos + 1 : end], quoted=True)
                self.pos = end + 1
            elif char == '"':
                self._double_quoted(word)
            elif char == "$":
                self._dollar(word, quoted=False)
            elif char == "`":
                self._backtick(word)
            elif char in "<>" and text.startswith("(", self.pos + 1) and not word.started:
                self.pos += 2
                self._substitution(word, opening=f"{char}(")
            elif char in ";&|()<>":
                if char in "<>" and word.started and _is_descriptor(word):
                    word = _WordBuilder()  # "2>": the number belongs to the redirection
                else:
                    end_word()
                if self.closing and char == ")" and depth == 0:
                    self.pos += 1
                    return out
                token = self._operator()
                if isinstance(token, _Op) and token.text == "(":
                    depth += 1
                elif isinstance(token, _Op) and token.text == ")":
                    depth -= 1
                out.append(token)
            else:
                word.add(char, quoted=False)
                self.pos += 1
        end_word()
        if self.closing:
            raise Unreadable("a $( ... ) substitution is not closed")
        self._read_here_documents(at_end=True)
        return out

    # --- pieces of words -------------------------------------------------------------------------

    def _backslash(self, word: _WordBuilder) -> None:
        following = self.text[self.pos + 1 : self.pos + 2]
        if following == "\n":  # a line continuation
            self.pos += 2
            return
        word.add(following or "\\", quoted=True)
        self.pos += 2

    def _double_quoted(self, word: _WordBuilder) -> None:
        text = self.text
        self.pos += 1
        word.add("", quoted=True)
        while True:
            if self.pos >= len(text):
                raise Unreadable("a double quote is not closed")
            char = text[self.pos]
            if char == '"':
                self.pos += 1
                return
            if char == "\\":
                following = text[self.pos + 1 : self.pos + 2]
                if following == "\n":
                    self.pos += 2
                elif following in ('"', "\\", "$", "`"):
                    word.add(following, quoted=True)
                    self.pos += 2
                else:
                    word.add("\\", quoted=True)
                    self.pos += 1
            elif char == "$":
                self._dollar(word, quoted=True)
            elif char == "`":
                self._backtick(word)
            else:
                word.add(char, quoted=True)
                self.pos += 1

    def _dollar(self, word: _WordBuilder, *, quoted: bool) -> None:
        text = self.text
        following = text[self.pos + 1 : self.pos + 2]
        if following == "'" and not quoted:
            end, decoded = _ansi_c(text, self.pos + 2)
            word.add(decoded, quoted=True)
            self.pos = end
        elif following == '"' and not quoted:
            self.pos += 1
            self._double_quoted(word)
        elif text.startswith("((", self.pos + 1):
            end = _closing(text, self.pos + 3, "((", "))")
            word.add(text[self.pos : end], quoted=quoted, literal=False)
            self.pos = end
        elif following == "(":
            self.pos += 2
            self._substitution(word, opening="$(")
        elif following == "{":
            end = _closing(text, self.pos + 2, "{", "}")
            word.add(text[self.pos : end], quoted=quoted, literal=False)
            self.pos = end
        elif following and (match := NAME.match(text, self.pos + 1)) is not None:
            word.add(text[self.pos : match.end()], quoted=quoted, literal=False)
            self.pos = match.end()
        elif following and following in SPECIAL_PARAMETERS:
            word.add(text[self.pos : self.pos + 2], quoted=quoted, literal=False)
            self.pos += 2
        else:
            word.add("$", quoted=quoted)
            self.pos += 1

    def _substitution(self, word: _WordBuilder, *, opening: str) -> None:
        """``$( ... )``, ``<( ... )`` or ``>( ... )``, the opening already read: its commands run too."""
        start = self.pos
        inner = _Lexer(self.text, start, closing=True)
        tokens = inner.tokens()
        self.substitutions.append(_Parser(tokens, tuple(inner.substitutions)).script())
        self.pos = inner.pos
        word.add(f"{opening}{self.text[start : self.pos]}", quoted=True, literal=False)

    def _backtick(self, word: _WordBuilder) -> None:
        text = self.text
        body: list[str] = []
        pos = self.pos + 1
        while True:
            if pos >= len(text):
                raise Unreadable("a backtick substitution is not closed")
            char = text[pos]
            if char == "`":
                break
            if char == "\\" and text[pos + 1 : pos + 2] in ("`", "\\", "$"):
                body.append(text[pos + 1])
                pos += 2
                continue
            body.append(char)
            pos += 1
        inner = "".join(body)
        self.substitutions.append(parse(inner))
        word.add(f"`{inner}`", quoted=True, literal=False)
        self.pos = pos + 1

    # --- operators and here-documents ------------------------------------------------------------

    def _operator(self) -> _Token:
        text = self.text
        for candidate in (
            ";;&",
            "<<<",
            "<<-",
            "&>>",
            ";;",
            ";&",
            "&&",
            "||",
            "|&",
            ">>",
            ">|",
            ">&",
            "<&",
            "<>",
            "<<",
            "&>",
            ";",
            "&",
            "|",
            "(",
            ")",
            "<",
            ">",
        ):
            if text.startswith(candidate, self.pos):
                self.pos += len(candidate)
                if candidate in ("<<", "<<-"):
                    self._here_next = _HereDocument(candidate)
                    return _Redir(candidate, self._here_next)
                if candidate in (">", ">>", ">|", ">&", "<&", "<>", "<", "&>", "&>>", "<<<"):
                    return _Redir(candidate)
                return _Op(candidate)
        raise AssertionError(f"no operator at {self.pos}")  # pragma: no cover - callers check the char

    def _register_here(self, delimiter: Word) -> None:
        document = self._here_next
        assert document is not None
        self._here_next = None
        self.pending_here.append((document, delimiter.text, document.op == "<<-"))

    def _read_here_documents(self, *, at_end: bool = False) -> None:
        """The bodies of the here-documents whose line just ended: up to each delimiter line."""
        text = self.text
        for document, delimiter, strip_tabs in self.pending_here:
            lines: list[str] = []
            while self.pos < len(text):
                end = text.find("\n", self.pos)
                line = text[self.pos :] if end == -1 else text[self.pos : end]
                self.pos = len(text) if end == -1 else end + 1
                if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                    break
                lines.append(line)
            document.body = "\n".join(lines)
        if at_end:
            for document, _, _ in self.pending_here:
                document.body = document.body or ""
        self.pending_here = []


def _is_descriptor(word: _WordBuilder) -> bool:
    """A word that is a file descriptor number (``2`` of ``2>``) or ``{name}`` of ``{fd}>``."""
    text = "".join(word.text)
    return word.literal and (text.isdigit() or (text.startswith("{") and text.endswith("}")))


def _closing(text: str, pos: int, opening: str, closing: str) -> int:
    """The position after the ``closing`` that matches (nesting ``opening``), quotes skipped."""
    depth = 1
    while pos < len(text):
        char = text[pos]
        if char == "\\":
            pos += 2
            continue
        if char in "'\"":
            end = text.find(char, pos + 1)
            if end == -1:
                break
            pos = end + 1
            continue
        if text.startswith(closing, pos):
            depth -= 1
            pos += len(closing)
            if depth == 0:
                return pos
            continue
        if text.startswith(opening, pos):
            depth += 1
            pos += len(opening)
            continue
        pos += 1
    raise Unreadable(f"a {opening} ... {closing} expansion is not closed")


def _ansi_c(text: str, pos: int) -> tuple[int, str]:
    """A ``$'...'`` string from ``pos`` (after the quote): (position after it, its decoded text)."""
    out: list[str] = []
    while pos < len(text):
        char = text[pos]
        if char == "'":
            return pos + 1, "".join(out)
        if char != "\\":
            out.append(char)
            pos += 1
            continue
        code = text[pos + 1 : pos + 2]
        if code in ANSI_ESCAPES:
            out.append(ANSI_ESCAPES[code])
            pos += 2
        elif code == "x" and (match := re.compile(r"[0-9A-Fa-f]{1,2}").match(text, pos + 2)):
            out.append(chr(int(match.group(), 16)))
            pos = match.end()
        elif code in ("u", "U") and (match := re.compile(r"[0-9A-Fa-f]{1,8}").match(text, pos + 2)):
            digits = match.group()[: 4 if code == "u" else 8]
            out.append(chr(min(int(digits, 16), 0x10FFFF)))
            pos += 2 + len(digits)
        elif code.isdigit() and (match := re.compile(r"[0-7]{1,3}").match(text, pos + 1)):
            out.append(chr(int(match.group(), 8)))
            pos = match.end()
        elif code == "c" and pos + 2 < len(text):
            out.append(chr(ord(text[pos + 2]) & 0x1F))
            pos += 3
        else:
            out.append("\\" + code)
            pos += 2
    raise Unreadable("a $'...' string is not closed")


# --- structure ---------------------------------------------------------------------------------------


class _Parser:
    def __init__(self, tokens: list[_Token], substitutions: tuple[Script, ...]) -> None:
        self.tokens = tokens
        self.substitutions = substitutions

    def script(self) -> Script:
        pipelines: list[Pipeline] = []
        pipeline: list[Command] = []
        words: list[Word] = []
        assignments: list[Word] = []
        redirects: list[Redirect] = []
        piped = False
        in_case = False
        tokens = iter(self.tokens)

        def finish(ending: str) -> None:
            nonlocal words, assignments, redirects, piped, in_case
            command = _command(words, assignments, redirects, piped)
            header = bool(words) and words[0].literal and words[0].text in HEADERS
            if words and words[0].literal and words[0].text == "case":
                in_case = True
            elif words and words[0].literal and words[0].text == "esac":
                in_case = False
            pattern = in_case and ending == ")" and not header
            if command is not None and not header and not pattern:
                pipeline.append(command)
            words, assignments, redirects, piped = [], [], [], False

        for token in tokens:
            if isinstance(token, Word):
                if (not words and ASSIGNMENT.match(token.text) and token.literal) or (
                    not words and ASSIGNMENT.match(token.text) and "=" in token.text
                ):
                    assignments.append(token)
                elif not words and token.literal and token.text in RESERVED:
                    continue
                else:
                    words.append(token)
            elif isinstance(token, _Redir):
                target = next(tokens, None)
                if not isinstance(target, Word):
                    raise Unreadable(f"the redirection {token.op} has no target")
                body = token.here.body if token.here is not None else None
                if token.op == "<<<":
                    body = target.text
                redirects.append(Redirect(token.op, target, body))
            elif token.text in PIPES:
                finish(token.text)
                piped = True
            else:
                finish(token.text)
                if pipeline:
                    pipelines.append(tuple(pipeline))
                    pipeline = []
        finish("")
        if pipeline:
            pipelines.append(tuple(pipeline))
        return Script(tuple(pipelines), self.substitutions)


def _command(
    words: list[Word], assignments: list[Word], redirects: list[Redirect], piped: bool
) -> Command | None:
    if not words and not assignments and not redirects:
        return None
    return Command(tuple(words), tuple(assignments), tuple(redirects), piped)
