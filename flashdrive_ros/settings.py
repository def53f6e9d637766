"""Settings as dataclass fields: default, help, choices and range live in the field of the
setting's owner; checks, node parameters and command-line flags of the layers above derive
from it."""

from __future__ import annotations

import argparse
import dataclasses
import math
from typing import Any

_UNSET = dataclasses.MISSING


def setting(default: Any, help: str, *, choices: tuple | None = None,
            minimum: float | None = None, maximum: float | None = None,
            read_only: bool = False) -> Any:
    """A dataclass field with its help text, choices and inclusive range in its metadata."""
    metadata = {"description": help, "read_only": read_only, "minimum": minimum,
                "maximum": maximum, "choices": choices}
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def owned_field(owner: type, name: str) -> dataclasses.Field:
    for f in dataclasses.fields(owner):
        if f.name == name:
            return f
    raise KeyError(f"{owner.__name__} has no setting {name!r}")


def default_of(owner: type, name: str) -> Any:
    f = owned_field(owner, name)
    return f.default_factory() if f.default is _UNSET else f.default


def choices_of(owner: type, name: str) -> tuple:
    return owned_field(owner, name).metadata["choices"]


def derived(owner: type, name: str, *, default: Any = _UNSET, help: str | None = None,
            also: str = "", **changes: Any) -> Any:
    """A field of another layer's dataclass for `owner`'s setting `name`: its default, help,
    choices and range unless `changes` (or `default` / `help`) say otherwise; `also` is
    appended to the help."""
    meta = dict(owned_field(owner, name).metadata)
    meta.update(changes)
    text = (meta["description"] if help is None else help) + (f" {also}" if also else "")
    return setting(default_of(owner, name) if default is _UNSET else default, text,
                   choices=meta["choices"], minimum=meta["minimum"],
                   maximum=meta["maximum"], read_only=meta["read_only"])


def value_problem(name: str, value: Any, metadata: dict) -> str | None:
    """Why `value` is outside the choices or range of the setting, or None (None values
    are left to the owner)."""
    if value is None or not metadata:
        return None
    choices = metadata.get("choices")
    if choices is not None and value not in choices:
        return f"{name} must be one of {tuple(choices)}, got {value!r}"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            return f"{name} must be finite, got {value}"
        if metadata.get("minimum") is not None and value < metadata["minimum"]:
            return f"{name} must be >= {metadata['minimum']}, got {value}"
        if metadata.get("maximum") is not None and value > metadata["maximum"]:
            return f"{name} must be <= {metadata['maximum']}, got {value}"
    return None


def field_problems(config: Any) -> list[str]:
    """value_problem of every field of the dataclass instance `config`."""
    return [problem for f in dataclasses.fields(config)
            if (problem := value_problem(f.name, getattr(config, f.name), f.metadata))]


def add_setting_argument(parser: argparse.ArgumentParser, owner: type, name: str, *,
                         flag: str | None = None, default: Any = _UNSET,
                         help: str | None = None, type: Any = None,
                         choices: tuple | None = None) -> argparse.Action:
    """`--name-with-dashes` (or `flag`) for `owner`'s setting `name`: its default, choices and
    help unless given; the range is checked where the value reaches the owner."""
    f = owned_field(owner, name)
    value = default_of(owner, name) if default is _UNSET else default
    text = f.metadata.get("description", "").replace("%", "%%") if help is None else help
    kind = type or (None if value is None or isinstance(value, str) else value.__class__)
    return parser.add_argument(flag or "--" + name.replace("_", "-"), default=value,
                               type=kind, choices=choices or f.metadata.get("choices"),
                               help=text)
