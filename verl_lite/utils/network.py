"""Addresses and ports of the node a process runs on.

Kept apart from the worker modules so that a Ray task running it imports nothing heavy: the worker
groups probe the first placement-group slot with it before any worker process exists.
"""

import random
import socket


def node_address_and_free_port() -> tuple[str, int]:
    """Return this node's IP address and a TCP port that is free on it right now.

    The port lies below the kernel's ephemeral range, where outgoing connections take their local ports:
    between this probe and rank 0's bind only an explicit bind can take it. Falls back to a port the
    kernel picks when that range is all taken.
    """
    import ray

    address = ray.util.get_node_ip_address() if ray.is_initialized() else socket.gethostbyname("localhost")
    low = _ephemeral_low()
    for port in random.Random().sample(range(10000, low), min(64, max(low - 10000, 0))):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("", port))
            except OSError:
                continue
        return address, port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return address, sock.getsockname()[1]


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux; 32768 elsewhere)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768
