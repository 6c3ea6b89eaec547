"""Kubernetes name syntax (apimachinery's validation), for names the admin configures and the
names rules check."""
from __future__ import annotations

import re

DNS1123_SUBDOMAIN_MAX = 253
LABEL_VALUE_MAX = 63

_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def is_dns1123_subdomain(name: str) -> bool:
    """An object name such as a ServiceAccount's or a LocalQueue's."""
    return len(name) <= DNS1123_SUBDOMAIN_MAX and _DNS1123_SUBDOMAIN.fullmatch(name) is not None


def is_label_value(value: str) -> bool:
    return len(value) <= LABEL_VALUE_MAX and _LABEL_VALUE.fullmatch(value) is not None
