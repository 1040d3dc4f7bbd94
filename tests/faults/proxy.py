"""A TCP proxy between a master and PostgreSQL that can go half-open.

    with HalfOpenProxy(unix_socket_path) as proxy:
        dsn = proxy.dsn()             # postgresql://postgres@127.0.0.1:<port>/postgres
        ...
        proxy.freeze()                # stop forwarding; every socket stays open

After ``freeze`` no byte moves in either direction and nothing is closed: to the master each
connection looks like a peer that went silent (a partition, a dead NAT entry), and to
PostgreSQL the session is still there, holding whatever it held. New connections are accepted
and then hang the same way. ``close`` ends it all.
"""

from __future__ import annotations

import socket
import threading


class HalfOpenProxy:
    def __init__(self, target: str | tuple[str, int]) -> None:
        self.target = target  # PostgreSQL's Unix socket file, or a TCP (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def freeze(self) -> None:
        self._flowing.clear()

    def thaw(self) -> None:
        self._flowing.set()

    def close(self) -> None:
        self._closed.set()
        self._flowing.set()  # release the pumps so they see the close
        with self._lock:
            socks, self._sockets = self._sockets + [self._listener], []
        for s in socks:
            # shutdown first: a pump blocked in recv keeps a merely closed socket alive (and so
            # PostgreSQL's session, with whatever it holds); shutdown wakes it and sends the FIN.
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def __enter__(self) -> "HalfOpenProxy":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._flowing.wait()  # frozen: the connection is accepted and then hangs
            if self._closed.is_set():
                client.close()
                return
            server = socket.socket(socket.AF_INET if isinstance(self.target, tuple)
                                   else socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                server.connect(self.target)
            except OSError:
                client.close()  # PostgreSQL is down: refuse, as a closed port would
                server.close()
                continue
            with self._lock:
                self._sockets += [client, server]
                self.connections += 1
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        while True:
            self._flowing.wait()
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if self._closed.is_set():
                return
            self._flowing.wait()  # a chunk read just before the freeze is held, not sent
            if self._closed.is_set():
                return
            if not data:
                for s in (src, dst):
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                return
            try:
                dst.sendall(data)
            except OSError:
                return
