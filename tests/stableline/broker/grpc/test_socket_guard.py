"""The gRPC port's per-address guard: the kernel's socket table read, and which
sockets go (of an address past its cap, the oldest with no call open)."""

from __future__ import annotations

import os
import socket

from stableline.broker.grpc.socket_guard import PortSocket, port_sockets, surplus


def test_the_kernel_lists_this_ports_established_sockets_with_their_peers():
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port), source_address=("127.0.0.2", 0))
        accepted, _ = server.accept()
        try:
            found = port_sockets(port)
            assert [(f.address, f.port) for f in found] == [client.getsockname()]
            assert found[0].inode == os.fstat(accepted.fileno()).st_ino
        finally:
            client.close()
            accepted.close()


def test_the_surplus_is_the_oldest_of_an_address_with_no_call_open():
    sockets = [
        PortSocket("10.0.0.1", 1, inode=5),
        PortSocket("10.0.0.1", 2, inode=1),  # the oldest, but calling
        PortSocket("10.0.0.1", 3, inode=3),
        PortSocket("10.0.0.1", 4, inode=9),
        PortSocket("10.0.0.2", 5, inode=2),
    ]
    chosen = surplus(sockets, per_address=2, calling={("10.0.0.1", 2)})
    assert [entry.inode for entry in chosen] == [3, 5]
    assert surplus(sockets, per_address=4, calling=set()) == []
    # Idle at this sweep only (just connected, its call not in yet): left alone.
    chosen = surplus(sockets, per_address=2, calling={("10.0.0.1", 2)}, idle_before={5})
    assert [entry.inode for entry in chosen] == [5]
