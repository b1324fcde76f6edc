"""Errors a plugin reports on purpose; they map to the WIT `error` variant.

Raise them from `manifest`, `reconcile`, `finalize`, `validate`, `mutate` or
`convert`. Any other exception a plugin raises is reported as
`failed("<ExceptionType>: message")` instead of trapping the component, so
that the host records it and retries with backoff.
"""


class PluginError(Exception):
    """Base of the three WIT error kinds; `kind` is the WIT case name."""

    kind = "failed"

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

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


def as_plugin_error(exc: BaseException) -> PluginError:
    """The WIT error a raised exception becomes: itself if it is one,
    else `Failed("<Type>: message")` (a bug in the plugin must not trap)."""
    if isinstance(exc, PluginError):
        return exc
    return Failed(f"{type(exc).__name__}: {exc}")
