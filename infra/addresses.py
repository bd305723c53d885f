"""Whether a network address names this machine (a Dask scheduler's, say)."""

from __future__ import annotations

import ipaddress
import socket


def is_local_address(address: str) -> bool:
    """True when a scheduler address names this machine's loopback interface."""
    host = address.split("://", 1)[-1].rsplit(":", 1)[0].strip("[]")
    try:
        return ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
    except (OSError, ValueError):
        return False
