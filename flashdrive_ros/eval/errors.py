"""Typed errors of the replay tool; the CLI turns every ReplayError into exit code 2."""

from __future__ import annotations


class ReplayError(Exception):
    """A replay cannot run; the message names the problem."""


class TopicsConfigError(ReplayError):
    """The topic mapping (command line or topics YAML) is invalid."""


class BagError(ReplayError):
    """The bag cannot be replayed."""


class BagNotFound(BagError):
    pass


class EmptyBag(BagError):
    pass


class MissingTopics(BagError):
    pass


class UnknownMessageType(BagError):
    pass


class CorruptBag(BagError):
    """The bag file is truncated or unreadable."""


class ImageDecodeError(ValueError):
    """One image message does not decode to RGB; the window using it is unusable."""
