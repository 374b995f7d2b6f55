"""A driver's facts in words (`rtax doctor`'s table): what a reader reads, not Python's repr.

A driver's `facts()` are the recording header's raw values (booleans, lists, the
container API's dicts, `sha256:` image digests), and `rtax doctor --format json` gives
them as they are. The table says them in words: `overlay: no` rather than `overlay False`,
`security options: seccomp (profile builtin)` rather than a list's repr, an image id as
the 12 hex digits `docker images` shows, `memory 512 MiB` rather than `memory_mib 512`, a
`<key>_reason` beside its key, a daemon's answer time as a sentence.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

DIGEST = re.compile(r"\bsha256:([0-9a-f]{12})[0-9a-f]*")
# the unit a key's suffix names: said after the value, the suffix left out of the name
UNITS = {"_mib": "MiB", "_mb": "MB", "_ms": "ms", "_s": "s", "_bytes": "bytes"}


def label(key: str) -> tuple[str, str | None]:
    """(the key in words, its unit): `memory_mib` -> (`memory`, `MiB`)."""
    for suffix, unit in UNITS.items():
        if key.endswith(suffix) and len(key) > len(suffix):
            return key[: -len(suffix)].replace("_", " "), unit
    return key.replace("_", " "), None


def value_words(value: Any) -> str:
    """A raw value in words: yes/no, none, a list joined, a dict as `key value` pairs."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None:
        return "none"
    if isinstance(value, int | float):
        return f"{value:g}" if isinstance(value, float) else str(value)
    if isinstance(value, Mapping):
        return ", ".join(pair_words(str(k), v) for k, v in value.items()) or "none"
    if isinstance(value, list | tuple | set | frozenset):
        items = (option_words(v) if isinstance(v, str) else value_words(v) for v in value)
        return ", ".join(items) or "none"
    return DIGEST.sub(r"\1", str(value))


def option_words(item: str) -> str:
    """One of a daemon's `name=seccomp,profile=builtin` options: `seccomp (profile builtin)`;
    any other string as it is (an image digest shortened)."""
    parts = [p.split("=", 1) for p in item.split(",")]
    if item.startswith("name=") and all(len(p) == 2 for p in parts):
        rest = ", ".join(f"{k} {v}" for k, v in parts[1:])
        return parts[0][1] + (f" ({rest})" if rest else "")
    return value_words(item)


def pair_words(key: str, value: Any) -> str:
    """`key value` in words: `memory 512 MiB`, `overlay: no`, `image id 3f2a1b9c0d4e`."""
    name, unit = label(key)
    text = value_words(value)
    if isinstance(value, bool) or value is None:
        return f"{name}: {text}"
    if isinstance(value, Mapping | list | tuple | set | frozenset):
        return f"{name}: {text}" if isinstance(value, list | tuple) else f"{name} ({text})"
    return f"{name} {text}" + (f" {unit}" if unit and isinstance(value, int | float) else "")


def daemon_words(timed: Mapping[str, Any]) -> str:
    """doctor's timing of the daemon's cheap call (`{"call", "answer_ms"}`), as a sentence."""
    ms = timed.get("answer_ms")
    if ms is None:
        return f"{timed.get('call')} did not answer"
    return f"{timed.get('call')} answered in {ms:.0f} ms"


def facts_words(facts: Mapping[str, Any]) -> list[str]:
    """A driver's facts in words, one a line, in their order, `<key>_reason` said beside
    `<key>`."""
    out = []
    for key, value in facts.items():
        if key.endswith("_reason") and key.removesuffix("_reason") in facts:
            continue  # said with its key
        if key == "daemon" and isinstance(value, Mapping):
            out.append(daemon_words(value))
            continue
        text = pair_words(key, value)
        why = facts.get(f"{key}_reason")
        if why:
            text += f" ({value_words(why)})"
        out.append(text)
    return out
