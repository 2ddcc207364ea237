"""Exceptions the KV store raises; each message names the key, field or store that is wrong.

The client unwraps Ray's ``RayTaskError``, so errors raised in an index actor keep their type."""

from __future__ import annotations


class KVStoreError(Exception):
    """Base class of every KV store error."""

    def __str__(self) -> str:
        # KeyError's default __str__ wraps the message in quotes; keep messages readable.
        return str(self.args[0]) if self.args else ""


class KVKeyError(KVStoreError, KeyError):
    """A key is not in the partition it was asked for."""


class KVFieldError(KVStoreError, KeyError):
    """A key exists but does not hold the requested field."""


class KVSchemaError(KVStoreError, ValueError):
    """Rows of one field disagree in dtype or shape, or a put is malformed."""


class KVStoreClosedError(KVStoreError, RuntimeError):
    """The store was shut down (or its index actors died) before the call."""


def preview(items: list, limit: int = 5) -> str:
    """Short list rendering for error messages: the first ``limit`` items and how many more."""
    shown = ", ".join(repr(item) for item in items[:limit])
    more = f", ... ({len(items) - limit} more)" if len(items) > limit else ""
    return f"[{shown}{more}]"
