"""Errors a plugin reports on purpose; they map to the WIT `error` variant.

Raise them from `manifest`, `reconcile`, `finalize`, `validate`, `mutate` or
`convert`. Any other exception a plugin raises is reported as
`failed("<ExceptionType>: message (at <where>)")` instead of trapping the
component, so that the host records it and retries with backoff; `<where>`
is the traceback's frames of the plugin's own code, outermost first, e.g.
`failed("KeyError: 'spec' (at app.py:14 in reconcile → app.py:30 in helper)")`
(see `trace`). An error raised on purpose carries no traceback: it is an
answer, not a crash.
"""

from __future__ import annotations

import os
import sys
from typing import Optional

#: At most this many frames are named (the outermost one and the innermost
#: ones, the rest counted), and the trace is at most `MAX_TRACE` characters:
#: it goes into one log line, an event and a condition.
MAX_FRAMES = 8
MAX_TRACE = 2048
#: An exception's own text is clipped to this when a trace follows it, so
#: that the host's 16 KiB limit on an error never cuts the trace off.
MAX_EXCEPTION_TEXT = 8192
#: What opens the trace in the error's text, and what separates frames.
TRACE_OPEN, TRACE_SEP = " (at ", " → "

_SDK_DIR = os.path.dirname(os.path.abspath(__file__))


class PluginError(Exception):
    """Base of the three WIT error kinds; `kind` is the WIT case name."""

    kind = "failed"
    #: Where a bug in the plugin raised (see `trace`); "" for an error
    #: raised on purpose.
    where = ""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    @property
    def text(self) -> str:
        """The error's text as the host receives it: the message, then the
        trace of the exception it wraps, if any."""
        return f"{self.message}{TRACE_OPEN}{self.where})" if self.where else self.message

    def __eq__(self, other):
        return type(self) is type(other) and self.message == other.message

    def __hash__(self):
        return hash((self.kind, self.message))

    def __repr__(self):
        return f"{type(self).__name__}({self.message!r})"


class InvalidConfig(PluginError):
    """The configuration document is not acceptable."""

    kind = "invalid-config"


class InvalidInput(PluginError):
    """The parent (or an observed object) is not acceptable."""

    kind = "invalid-input"


class Failed(PluginError):
    """Anything else; the host records it and retries with backoff."""

    kind = "failed"


def as_plugin_error(exc: BaseException, plugin=None) -> PluginError:
    """The WIT error a raised exception becomes: itself if it is one,
    else `Failed("<Type>: message")` (a bug in the plugin must not trap)
    whose `where` names the frames of `plugin`'s code it went through."""
    if isinstance(exc, PluginError):
        return exc
    text = f"{type(exc).__name__}: {exc}"
    where = trace(exc, plugin_root(plugin)) if plugin is not None else ""
    if where and len(text) > MAX_EXCEPTION_TEXT:
        text = text[:MAX_EXCEPTION_TEXT - 1] + "…"
    failed = Failed(text)
    failed.where = where
    return failed


def plugin_root(plugin) -> Optional[str]:
    """The plugin's directory: that of the module defining `plugin` (a
    class or an instance), or of the `app` module above it (the module
    `build` componentizes and the fixture runner imports by default)."""
    cls = plugin if isinstance(plugin, type) else type(plugin)
    module = sys.modules.get(getattr(cls, "__module__", "") or "")
    path = getattr(module, "__file__", None)
    if not path:
        return None
    root = os.path.dirname(os.path.abspath(path))
    app = getattr(sys.modules.get("app"), "__file__", None)
    if app:
        top = os.path.dirname(os.path.abspath(app))
        if root == top or root.startswith(top + os.sep):
            return top
    return root


def trace(exc: BaseException, root: Optional[str]) -> str:
    """The frames of `exc`'s traceback in files under `root` (the
    plugin's own code; the SDK's, the standard library's and any other
    left out), outermost first, each `file:line in function` with the file
    relative to `root`, joined by `TRACE_SEP`. At most `MAX_FRAMES` frames
    (the outermost and the innermost ones, with how many were left out
    between) and `MAX_TRACE` characters. "" when none is the plugin's."""
    if root is None:
        return ""
    root = os.path.abspath(root)
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        path = os.path.abspath(code.co_filename) if code.co_filename else ""
        if path.startswith(root + os.sep) and not path.startswith(_SDK_DIR + os.sep):
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            frames.append(f"{rel}:{tb.tb_lineno} in {code.co_name}")
        tb = tb.tb_next
    left_out = 0
    while frames and (len(frames) > MAX_FRAMES
                      or len(TRACE_SEP.join(frames)) > MAX_TRACE) and len(frames) > 2:
        # Keep the outermost frame (where the call came in) and the
        # innermost ones (where it went wrong).
        del frames[1]
        left_out += 1
    if left_out:
        frames.insert(1, f"… {left_out} more")
    joined = TRACE_SEP.join(frames)
    return joined if len(joined) <= MAX_TRACE else joined[:MAX_TRACE - 1] + "…"
