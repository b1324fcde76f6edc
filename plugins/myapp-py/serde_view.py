"""Read JSON the way the Rust `myapp` plugin's serde structs read it.

The Python port must give exactly the Rust plugin's answers, errors
included, and those come from `serde_json::from_value` into derived structs:
map keys are visited in sorted order (serde_json's default `Map` is a
BTreeMap), the first bad field fails the whole struct, missing required
fields are reported after the visit in declaration order, unknown fields
are ignored, and a struct also reads from a JSON array (fields by position,
fields with a default may be left off). The messages are serde's.
"""

import json

I32 = (-(2**31), 2**31 - 1)
I64 = (-(2**63), 2**63 - 1)
U64_MAX = 2**64 - 1


class SerdeError(Exception):
    """A serde-style deserialization error; str() is serde's message."""


def unexpected(v) -> str:
    """serde's `Unexpected` description of a JSON value."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return f"boolean `{'true' if v else 'false'}`"
    if isinstance(v, int):
        return f"integer `{v}`"
    if isinstance(v, float):
        return f"floating point `{v!r}`"
    if isinstance(v, str):
        return f"string {json.dumps(v, ensure_ascii=False)}"
    if isinstance(v, list):
        return "sequence"
    return "map"


def integer(v, name: str, lo_hi):
    if isinstance(v, int) and not isinstance(v, bool):
        lo, hi = lo_hi
        if lo <= v <= hi:
            return v
        if -(2**63) <= v <= U64_MAX:
            raise SerdeError(f"invalid value: integer `{v}`, expected {name}")
    raise SerdeError(f"invalid type: {unexpected(v)}, expected {name}")


def i32(v):
    return integer(v, "i32", I32)


def i64(v):
    return integer(v, "i64", I64)


def string(v):
    if isinstance(v, str):
        return v
    raise SerdeError(f"invalid type: {unexpected(v)}, expected a string")


def option(read):
    """`Option<T>`: null is None."""
    return lambda v: None if v is None else read(v)


def string_map(v):
    """`BTreeMap<String, String>`."""
    if not isinstance(v, dict):
        raise SerdeError(f"invalid type: {unexpected(v)}, expected a map")
    return {k: string(x) for k, x in sorted(v.items())}


_MISSING = object()


def struct(name: str, fields):
    """A reader of a derived struct. `fields`: (json key, reader, default)
    in declaration order; default `_MISSING` makes the field required, a
    callable is called for the default. `Option` fields read as None when
    missing (pass `default=None`)."""

    def read(v):
        out = {}
        if isinstance(v, dict):
            known = {f[0]: f for f in fields}
            for key in sorted(v):
                if key in known:
                    out[key] = known[key][1](v[key])
            for key, _, default in fields:
                if key not in out:
                    if default is _MISSING:
                        raise SerdeError(f"missing field `{key}`")
                    out[key] = default() if callable(default) else default
            return out
        if isinstance(v, list):
            for i, (key, reader, default) in enumerate(fields):
                if i < len(v):
                    out[key] = reader(v[i])
                elif default is _MISSING:
                    raise SerdeError(
                        f"invalid length {len(v)}, expected struct {name} with {len(fields)} elements")
                else:
                    out[key] = default() if callable(default) else default
            if len(v) > len(fields):
                raise SerdeError(f"invalid length {len(v)}, expected fewer elements in array")
            return out
        raise SerdeError(f"invalid type: {unexpected(v)}, expected struct {name}")

    return read


MISSING = _MISSING
