"""Camera slot sanity: does the topic or frame_id fed into a camera slot name that slot's
camera, or rather another slot's (two cameras swapped in the configuration)?"""

from __future__ import annotations

import re

GENERIC_TOKENS = frozenset({"camera", "cam", "image", "images", "raw", "rect", "color",
                            "optical", "frame", "link", "fov", "compressed", "sensing",
                            "info", "ros", "sensor", "sensors", "deg"})


def name_tokens(name: str) -> set[str]:
    """The distinctive words of a camera, topic or frame name ("120fov" -> "120")."""
    words = re.findall(r"[a-z]+|[0-9]+", name.lower())
    return {w for w in words if w not in GENERIC_TOKENS}


def slot_mismatch(slot_names: list[str], index: int, name: str, expected: str = "") -> str:
    """Why `name` (a topic or frame_id) does not fit camera slot `index`, or "".

    With `expected` (a configured frame_id), anything else is a mismatch. Otherwise `name`
    fits unless it shares strictly more distinctive words with another slot's name than with
    its own (a name that matches no slot cannot be judged and passes)."""
    own = slot_names[index]
    if expected:
        if name == expected:
            return ""
        return f"slot {index} ({own}) expects frame_id {expected!r}, got {name!r}"
    tokens = name_tokens(name)
    scores = [len(tokens & name_tokens(slot)) for slot in slot_names]
    best = max(scores)
    if best == 0 or scores[index] == best:
        return ""
    other = slot_names[scores.index(best)]
    return (f"slot {index} ({own}) is fed {name!r}, which names {other}; are two camera "
            f"topics swapped?")
