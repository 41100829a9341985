"""Servers on 127.0.0.1 that answer each connection with a function: for S3 endpoints that
answer wrongly (cut, empty, drip-fed, silent), which no HTTP server library would send."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

Answer = Callable[[socket.socket], None]
"""What a server does with one connection it accepted."""


class RawServers:
    """Servers on 127.0.0.1 answering each connection with a given function."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self._sockets: list[socket.socket] = []

    def start(self, answer: Answer) -> str:
        """A new server answering with ``answer``; its URL."""
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen(64)
        self._sockets.append(server)

        def serve(connection: socket.socket) -> None:
            with connection:
                try:
                    answer(connection)
                except OSError:
                    return

        def accept() -> None:
            while True:
                try:
                    connection, _ = server.accept()
                except OSError:
                    return
                threading.Thread(target=serve, args=(connection,), daemon=True).start()

        threading.Thread(target=accept, daemon=True).start()
        return f"http://127.0.0.1:{server.getsockname()[1]}"

    def close(self) -> None:
        self.stop.set()
        for server in self._sockets:
            server.close()
