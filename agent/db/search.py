"""Full-text search over messages: the one place that knows how each database does it.

Migration 0001 creates the index: on SQLite an FTS5 table ``messages_fts`` (kept by triggers, ``rowid``
= ``messages.id``), on PostgreSQL a generated ``tsvector`` column ``messages.search`` with a GIN index.
:func:`text_match` gives a repository the pieces of a query for either: what to select from, the match
condition, a snippet with the matched words in ``[brackets]``, and the order that puts the best match
first (built once per dialect; the user's text is a parameter). Both treat the user's text as plain
words that must all occur, never as query syntax: ``C++ AND "rust:`` finds the words c, and, rust.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from agent.db.schema import messages

SNIPPET_WORDS = 24

_fts = sa.table("messages_fts", sa.column("rowid", sa.Integer), sa.column("rank", sa.Double))
# FTS5 names its table as the left side of MATCH
_fts_name: sa.ColumnElement[Any] = sa.literal_column("messages_fts")
# PostgreSQL only (not in agent.db.schema), built with the 'simple' text search configuration
_search: sa.ColumnElement[Any] = sa.literal_column("messages.search")
_simple: sa.ColumnElement[str] = sa.literal_column("'simple'")
# ts_headline marks matches with private-use characters (a message's own brackets stay apart), which
# _finish_headline turns into FTS5's form
_START, _END = "\ue000", "\ue001"
_headline_options: sa.ColumnElement[str] = sa.literal_column(
    f"""'StartSel="{_START}", StopSel="{_END}", MaxWords={SNIPPET_WORDS}, MinWords=5, MaxFragments=1'"""
)


@dataclass(frozen=True)
class TextMatch:
    """Select from ``source`` (``messages``, joined to the index when it is a table of its own); the
    condition reads the bound parameter ``words``, whose value is ``words(text)`` for the user's text;
    ``finish(snippet, content)`` is the snippet to show (the same form on both databases)."""

    source: sa.FromClause
    condition: sa.ColumnElement[bool]
    snippet: sa.ColumnElement[str]
    best_first: sa.ColumnElement[Any]
    words: Callable[[str], str]
    finish: Callable[[str, str], str]


_WORDS = sa.bindparam("words", type_=sa.Text)


@functools.cache
def text_match(dialect: str) -> TextMatch:
    """Messages whose content has every word of the parameter ``words``, for ``dialect`` ("sqlite" or
    "postgresql"); built once per dialect."""
    if dialect == "sqlite":
        return TextMatch(
            source=_fts.join(messages, messages.c.id == _fts.c.rowid),
            condition=_fts_name.op("MATCH")(_WORDS),
            snippet=sa.func.snippet(_fts_name, 0, "[", "]", "…", SNIPPET_WORDS),
            best_first=_fts.c.rank,  # bm25: lower is better
            words=fts_query,
            finish=lambda snippet, _: snippet,
        )
    query = sa.func.plainto_tsquery(_simple, _WORDS)
    return TextMatch(
        source=messages,
        condition=_search.op("@@")(query),
        snippet=sa.func.ts_headline(_simple, messages.c.content, query, _headline_options),
        best_first=sa.func.ts_rank(_search, query).desc(),
        words=str,  # plainto_tsquery reads plain text as words
        finish=_finish_headline,
    )


def _finish_headline(headline: str, content: str) -> str:
    """ts_headline's fragment in FTS5's form: matches in brackets, adjacent ones as one (its parser
    reads ``FACT-3`` as ``FACT`` and ``-3``), and ``…`` where the fragment cuts the message."""
    plain = headline.replace(_START, "").replace(_END, "")
    before = "" if content.lstrip().startswith(plain) else "…"
    after = "" if content.rstrip().endswith(plain) else "…"
    marked = headline.replace(_END + _START, "").replace(_START, "[").replace(_END, "]")
    return before + marked + after


def fts_query(text: str) -> str:
    """FTS5: quote each word so user text is never parsed as FTS5 syntax (``AND``, ``*``, ``:`` ...)."""
    words = [word.replace('"', '""') for word in text.split() if word.strip()]
    return " ".join(f'"{word}"' for word in words) or '""'
