"""What counts as loopback: the one answer `sana up`, `sana serve` and the app's request guard share."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

LOCALHOST = "localhost"


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` (an address or a name, without a port) is this machine's loopback.

    >>> [is_loopback(h) for h in ("127.0.0.1", "127.9.9.9", "::1", "::ffff:127.0.0.1", "LocalHost", "[::1]")]
    [True, True, True, True, True, True]
    >>> [is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.5", "testclient", "localhost.evil.com", "", None)]
    [False, False, False, False, False, False, False]
    """
    if not host:
        return False
    host = host.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host == LOCALHOST:
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


def host_and_port(authority: str, scheme: str) -> tuple[str, int] | None:
    """The host and port of a ``Host`` header's value (or an origin's authority), the scheme's port by default.

    >>> host_and_port("127.0.0.1:8000", "http"), host_and_port("[::1]", "https"), host_and_port("a b", "http")
    (('127.0.0.1', 8000), ('::1', 443), None)
    """
    try:
        parts = urlsplit(f"{scheme}://{authority}")
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname or parts.username is not None or parts.path or parts.query or " " in authority:
        return None
    return parts.hostname, port or (443 if scheme in ("https", "wss") else 80)
