"""A tiny recording HTTP server on 127.0.0.1 that answers like a cloud API, for tests.

Each stand-in is a :class:`StandIn` with routes ``(method, regex, handler)``; a handler gets the
:class:`Request` (and the regex match) and returns ``(status, body)`` where body is a dict (sent as JSON),
bytes or str. Every request is recorded in ``standin.requests`` for the test to assert on. Unrouted
requests get a 404 in Google's error shape. ``fail_next(status, message)`` makes the next matching request
answer with an error, to test how the product reports it.
"""
from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import parse_qs, urlparse


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body or b"null")


def google_error(status: int, message: str) -> dict[str, Any]:
    names = {400: "INVALID_ARGUMENT", 403: "PERMISSION_DENIED", 404: "NOT_FOUND", 409: "ALREADY_EXISTS",
             429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}
    return {"error": {"code": status, "message": message, "status": names.get(status, "UNKNOWN")}}


Handler = Callable[..., "tuple[int, Any] | tuple[int, Any, dict[str, str]]"]


class LoopbackServer:
    """A socketserver on 127.0.0.1 (a free port) served by a daemon thread; ``stop()`` shuts it down."""

    def _serve(self, server) -> None:
        self.server = server
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


@dataclass
class StandIn(LoopbackServer):
    routes: list[tuple[str, str, Handler]] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)
    failures: list[tuple[str, int, str]] = field(default_factory=list)  # (path regex, status, message)

    def route(self, method: str, pattern: str, handler: Handler) -> None:
        self.routes.append((method, pattern, handler))

    def fail_next(self, status: int, message: str, path_pattern: str = ".*") -> None:
        self.failures.append((path_pattern, status, message))

    # -- server ---------------------------------------------------------------------------------
    def start(self) -> "StandIn":
        standin = self

        class _H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _handle(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                url = urlparse(self.path)
                req = Request(self.command, url.path, parse_qs(url.query), dict(self.headers), body)
                standin.requests.append(req)
                status, payload, headers = standin._dispatch(req)
                data = payload if isinstance(payload, bytes) else (
                    payload.encode() if isinstance(payload, str) else json.dumps(payload).encode())
                self.send_response(status)
                ctype = "application/json" if not isinstance(payload, (bytes, str)) else "application/octet-stream"
                self.send_header("Content-Type", headers.pop("Content-Type", ctype))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _handle

        self._serve(ThreadingHTTPServer(("127.0.0.1", 0), _H))
        return self

    def __enter__(self) -> "StandIn":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _dispatch(self, req: Request) -> tuple[int, Any, dict[str, str]]:
        for i, (pattern, status, message) in enumerate(self.failures):
            if re.search(pattern, req.path):
                del self.failures[i]
                return status, google_error(status, message), {}
        for method, pattern, handler in self.routes:
            m = re.fullmatch(pattern, req.path)
            if method == req.method and m:
                out = handler(req, m)
                return (out[0], out[1], dict(out[2])) if len(out) == 3 else (out[0], out[1], {})
        return 404, google_error(404, f"stand-in has no route for {req.method} {req.path}"), {}

    def calls(self, method: str, pattern: str) -> list[Request]:
        return [r for r in self.requests if r.method == method and re.search(pattern, r.path)]
