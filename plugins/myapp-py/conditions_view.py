"""The previous `status.conditions` as the Rust `myapp` reads them.

The Rust plugin reads the whole previous status as `MyAppStatus` and falls
back to the default (no conditions) when it does not read: `phase` and
`availableReplicas` are required, `observedGeneration` must be an i64,
`conditions` (default empty) must be a list of readable conditions. The
conditions it keeps are rewritten in the SDK's normal form.
"""

from kubeplug_sdk import read_condition

import serde_view as sv


def _conditions(v):
    if not isinstance(v, list):
        raise sv.SerdeError("expected a sequence")
    out = []
    for c in v:
        r = read_condition(c)
        if r is None:
            raise sv.SerdeError("bad condition")
        out.append(r)
    return out


_STATUS = sv.struct("MyAppStatus", [
    ("phase", sv.string, sv.MISSING),
    ("availableReplicas", sv.i32, sv.MISSING),
    ("observedGeneration", sv.option(sv.i64), None),
    ("conditions", _conditions, list),
])


def conditions_of(status) -> list:
    """The conditions of a previous status, or [] when it does not read."""
    try:
        return _STATUS(status)["conditions"]
    except sv.SerdeError:
        return []
