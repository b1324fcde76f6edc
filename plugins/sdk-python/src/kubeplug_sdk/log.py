"""Structured logging through the host's `log` import.

Inside the component, messages go to the WIT `log` function (the host adds
the plugin name and object). Run without Wasm (tests, the fixture runner)
the bindings do not exist, so messages go to stderr as `LEVEL msg k=v`.
"""

from __future__ import annotations

import sys

try:  # Only importable inside a componentize-py component.
    from wit_world.imports import log as _wit_log  # type: ignore
except Exception:  # pragma: no cover - depends on the environment
    _wit_log = None


def _emit(level: str, message: str, fields: dict) -> None:
    pairs = [(str(k), str(v)) for k, v in fields.items()]
    if _wit_log is not None:
        _wit_log.log(getattr(_wit_log.Level, level.upper()), str(message), pairs)
    else:
        extra = "".join(f" {k}={v}" for k, v in pairs)
        print(f"{level.upper()} {message}{extra}", file=sys.stderr)


def trace(message: str, **fields) -> None:
    _emit("trace", message, fields)


def debug(message: str, **fields) -> None:
    _emit("debug", message, fields)


def info(message: str, **fields) -> None:
    _emit("info", message, fields)


def warn(message: str, **fields) -> None:
    _emit("warn", message, fields)


def error(message: str, **fields) -> None:
    _emit("error", message, fields)
