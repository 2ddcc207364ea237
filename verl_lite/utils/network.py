"""Addresses and ports of the node a process runs on.

Kept apart from the worker modules so that a Ray task running it imports nothing heavy: the worker
groups probe the first placement-group slot with it before any worker process exists.
"""

import socket


def node_address_and_free_port() -> tuple[str, int]:
    """Return this node's IP address and a TCP port that is free on it right now."""
    import ray

    address = ray.util.get_node_ip_address() if ray.is_initialized() else socket.gethostbyname("localhost")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        port = sock.getsockname()[1]
    return address, port
