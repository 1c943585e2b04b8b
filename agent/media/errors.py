"""Why a file cannot go to the model, in words for the person who sent it."""

from __future__ import annotations


class MediaRefused(Exception):
    """A file that is refused (too large, damaged, over a limit). The message is one sentence that
    names the file and the limit or the problem; nothing of the message is stored or sent."""
