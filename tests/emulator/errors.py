"""The one error the request model raises: a 400 the real API would answer."""

from __future__ import annotations


class RequestInvalid(Exception):
    """A 400 ``invalid_request_error`` with the provider's message."""
