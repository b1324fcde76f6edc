"""Kubernetes name checks plugins need to validate their config."""

import re

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def is_dns_label(s) -> bool:
    """RFC 1123 label (namespace names): lowercase alphanumerics and `-`,
    at most 63 characters, alphanumeric at both ends."""
    return isinstance(s, str) and len(s) <= 63 and _DNS_LABEL.fullmatch(s) is not None


def is_label_key(s) -> bool:
    """A label key: `[prefix/]name`, prefix a DNS subdomain (<= 253),
    name <= 63 characters of alphanumerics, `-`, `_`, `.`."""
    if not isinstance(s, str):
        return False
    prefix, _, name = s.rpartition("/")
    if "/" in s and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return False
    return 0 < len(name) <= 63 and _NAME.fullmatch(name) is not None


def is_label_value(s) -> bool:
    """A label value: empty, or <= 63 characters like a key's name part
    (so no `:`)."""
    return isinstance(s, str) and (s == "" or (len(s) <= 63 and _NAME.fullmatch(s) is not None))
