"""Estimate how much telegramify-markdown's layout would grow a Markdown text, before converting it.

telegramify-markdown indents a nested list item by two spaces per level and pads every table cell to
its column's width. Both grow quadratically with hostile input: 10,000 characters of ``- - - ...``
render to 25 million. One cheap parse with pyromark (the parser telegramify-markdown itself uses)
measures that growth, so ``adapters.text.styled`` can send such input as plain text instead of
spending seconds and memory on it.
"""

from __future__ import annotations

import pyromark

_TABLE_SEPARATOR = 3  # telegramify joins cells with " | "


class _Table:
    def __init__(self) -> None:
        self.widths: list[int] = []
        self.rows = 0
        self.column = 0
        self.cell_width: int | None = None  # None outside a cell

    def start_row(self) -> None:
        self.rows += 1
        self.column = 0

    def end_cell(self) -> None:
        if self.column == len(self.widths):
            self.widths.append(0)
        self.widths[self.column] = max(self.widths[self.column], self.cell_width or 0)
        self.column += 1
        self.cell_width = None

    def size(self) -> int:
        return self.rows * (sum(self.widths) + _TABLE_SEPARATOR * len(self.widths))


def layout_growth(markdown: str) -> int:
    """Characters of list indentation and table layout the rendering adds (an estimate).

    Lists: ``2 * (depth - 1)`` per item. Tables: rows times the padded row width, counting cell
    text and inline code as the column widths.
    """
    growth = 0
    depth = 0
    table: _Table | None = None
    for event in pyromark.events(markdown, options=pyromark.Options.ENABLE_TABLES):
        match event:
            case {"Start": {"List": _}}:
                depth += 1
            case {"End": {"List": _}}:
                depth -= 1
            case {"Start": "Item"}:
                growth += 2 * max(depth - 1, 0)
            case {"Start": {"Table": _}}:
                table = _Table()
            case {"End": "Table"} if table is not None:
                growth += table.size()
                table = None
            case {"Start": "TableHead" | "TableRow"} if table is not None:
                table.start_row()
            case {"Start": "TableCell"} if table is not None:
                table.cell_width = 0
            case {"End": "TableCell"} if table is not None:
                table.end_cell()
            case {"Text": str() as piece} | {"Code": str() as piece}:
                if table is not None and table.cell_width is not None:
                    table.cell_width += len(piece)
    return growth
