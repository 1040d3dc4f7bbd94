"""The web console: static HTML, CSS and ES modules served by ``jobrun web`` at ``/``.

Nothing here talks to the database: the pages use only the ``/api/v1`` JSON API (and its
``/api/v1/events`` stream), so whatever token and origin rules guard the API guard the
console's data too. The files are package data, served as they are (no build step, nothing
fetched from elsewhere at run time), with a Content-Security-Policy that allows only this
origin's scripts, styles and connections.
"""

from __future__ import annotations

from pathlib import Path
from typing import Awaitable, Callable

from starlette.responses import PlainTextResponse, Response
from starlette.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

ROOT = Path(__file__).resolve().parent
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
       "img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
API_PREFIX = "/api/"
SERVED = (".html", ".css", ".js")  # not the package's .py files


class ConsoleFiles(StaticFiles):
    """The console's files, each with the security headers a page served here should carry."""

    def __init__(self) -> None:
        super().__init__(directory=ROOT, html=True)

    async def get_response(self, path: str, scope: Scope) -> Response:
        if path not in ("", ".") and not path.endswith(SERVED):
            return PlainTextResponse("Not Found", status_code=404)
        return await super().get_response(path, scope)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def with_headers(message: dict) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [(b"content-security-policy", CSP.encode()),
                            (b"x-content-type-options", b"nosniff"),
                            (b"referrer-policy", b"no-referrer"),
                            (b"cache-control", b"no-cache")]
                message = {**message, "headers": headers}
            await send(message)

        await super().__call__(scope, receive, with_headers)


def beside(api) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """An ASGI app that sends ``/api/...`` (and every non-HTTP scope) to ``api`` (with its own
    host, token and origin guard) and every other path to the console's files.

    The files are outside the token check on purpose: a browser must be able to load the page
    that then asks for the token. They hold no data; every byte of data comes through ``api``.
    """
    files = ConsoleFiles()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or path == "/api" or path.startswith(API_PREFIX):
            await api(scope, receive, send)
        elif scope["method"] not in ("GET", "HEAD"):
            await PlainTextResponse("Method Not Allowed", status_code=405)(scope, receive, send)
        else:
            await files(scope, receive, send)

    return app
