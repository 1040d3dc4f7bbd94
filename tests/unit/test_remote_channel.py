"""The remote worker's HTTP channel (jobrun.remote.http): a kept-alive connection the server
closed while it was idle is reopened and the request sent again, once; a server that is gone
is Unreachable."""

from __future__ import annotations

import http.server
import json
import threading

import pytest

from jobrun.remote.http import Channel, Unreachable

pytestmark = pytest.mark.unit


class _Closing(http.server.BaseHTTPRequestHandler):
    """Answers as if it kept the connection alive, then closes it (an idle timeout)."""

    protocol_version = "HTTP/1.1"
    served = 0

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        type(self).served += 1
        body = json.dumps({"n": type(self).served}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Closing)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def test_a_connection_closed_while_idle_is_reopened_once(server):
    _Closing.served = 0
    channel = Channel(f"http://127.0.0.1:{server.server_port}", "t" * 20, 5.0)
    try:
        answers = [channel.call("POST", "/x", {"i": i})["n"] for i in range(3)]
    finally:
        channel.close()
    assert answers == [1, 2, 3]  # each after the first went out again on a new connection


def test_a_server_that_is_gone_is_unreachable(server):
    port = server.server_port
    server.shutdown()
    server.server_close()
    channel = Channel(f"http://127.0.0.1:{port}", "t" * 20, 5.0)
    with pytest.raises(Unreachable):
        channel.call("POST", "/x", {})
