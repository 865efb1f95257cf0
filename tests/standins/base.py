"""A tiny recording HTTP server on 127.0.0.1 that answers like a cloud API, for tests.

Each stand-in is a :class:`StandIn` with routes ``(method, regex, handler)``; a handler gets the
:class:`Request` (and the regex match) and returns ``(status, body)`` where body is a dict (sent as JSON),
bytes or str. Every request is recorded in ``standin.requests`` for the test to assert on. Unrouted
requests get a 404 in Google's error shape.

Faults, to test how the product reports them (:meth:`StandIn.fault`; ``fail_next(status, message)`` is
one answered error): an HTTP status in Google's error shape (503, 429, 500, 403...), ``drop`` (the
connection is closed before anything is done), ``drop-after`` (the request is carried out, then the
connection closed without an answer: the client cannot know it worked), ``hang`` (never answers; released
when the server stops), ``html`` (200 with an HTML page, as a captive portal or a wrong endpoint answers).

:func:`decode` parses a request body into a real API type the way the real server does (``ParseDict``
without ignoring unknown fields: an unknown field is a 400); :func:`typed` turns an answer into the JSON of a
real response type, with integer enums when the client asked for them (``$alt=json;enum-encoding=int``).
"""
from __future__ import annotations

import json
import re
import threading
import socket
import sys
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
FAULTS = ("drop", "drop-after", "hang", "html")
HTML_PAGE = b"<!DOCTYPE html><html><head><title>Sign in</title></head><body>Please sign in to the network.</body></html>"


class BadRequest(Exception):
    """What the real server answers 400 to; raised by :func:`decode`, answered by the stand-in."""


def decode(req: "Request", message_class, body: Any = None):
    """The request body as ``message_class`` (a proto-plus class), parsed strictly like the real API."""
    from google.protobuf import json_format

    message = message_class.pb()()
    try:
        json_format.ParseDict(req.json() if body is None else body, message)
    except (json_format.ParseError, ValueError) as exc:
        raise BadRequest(f"Invalid JSON payload received. {' '.join(str(exc).split())}") from None
    return message_class.wrap(message)


def ints_asked(req: "Request") -> bool:
    return "enum-encoding=int" in " ".join(req.query.get("$alt", []))


def typed(req: "Request", message) -> dict[str, Any]:
    """The JSON of ``message`` (a proto-plus or protobuf message), as the real server encodes it for ``req``."""
    from google.protobuf import json_format

    pb = message if hasattr(message, "DESCRIPTOR") else type(message).pb(message)
    return json.loads(json_format.MessageToJson(pb, use_integers_for_enums=ints_asked(req)))


class LoopbackServer:
    """A socketserver on 127.0.0.1 (a free port) served by a daemon thread; ``stop()`` shuts it down."""

    def _serve(self, server) -> None:
        self.server = server
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        stopping = getattr(self, "stopping", None)
        if stopping is not None:
            stopping.set()  # releases the handlers of "hang" faults
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
    # [path regex, method or None, status or fault name, message, times left (None: always)]
    failures: list[list[Any]] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)

    def route(self, method: str, pattern: str, handler: Handler) -> None:
        self.routes.append((method, pattern, handler))

    def fail_next(self, status: int, message: str, path_pattern: str = ".*") -> None:
        self.failures.append([path_pattern, None, status, message, 1])

    def fault(self, kind: "int | str", path_pattern: str = ".*", method: str | None = None, times: int | None = 1,
              message: str = "") -> None:
        """Answer the next ``times`` matching requests (None: every one) with ``kind``: an HTTP status, or
        one of :data:`FAULTS`."""
        assert isinstance(kind, int) or kind in FAULTS, kind
        self.failures.append([path_pattern, method, kind, message or f"stand-in fault {kind}", times])

    def _take_fault(self, req: Request):
        for entry in self.failures:
            pattern, method, kind, message, times = entry
            if re.search(pattern, req.path) and method in (None, req.method):
                if times is not None:
                    entry[4] -= 1
                    if entry[4] <= 0:
                        self.failures.remove(entry)
                return kind, message
        return None, ""

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
                kind, message = standin._take_fault(req)
                if kind in ("drop", "hang"):
                    if kind == "hang":
                        standin.stopping.wait()
                    self.close_connection = True
                    try:
                        self.request.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    return
                if isinstance(kind, int):
                    status, payload, headers = kind, google_error(kind, message), {}
                elif kind == "html":
                    status, payload, headers = 200, HTML_PAGE, {"Content-Type": "text/html; charset=utf-8"}
                else:
                    status, payload, headers = standin._dispatch(req)
                if kind == "drop-after":  # carried out, then no answer
                    self.close_connection = True
                    self.request.shutdown(socket.SHUT_RDWR)
                    return
                data = payload if isinstance(payload, bytes) else (
                    payload.encode() if isinstance(payload, str) else json.dumps(payload).encode())
                self.send_response(status)
                ctype = "application/json" if not isinstance(payload, (bytes, str)) else "application/octet-stream"
                self.send_header("Content-Type", headers.pop("Content-Type", ctype))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _handle

        class _Server(ThreadingHTTPServer):
            def handle_error(self, request, client_address):  # a client that hung up (Ctrl-C, a timeout): quiet
                if not isinstance(sys.exc_info()[1], (ConnectionError, OSError)):
                    super().handle_error(request, client_address)

        self._serve(_Server(("127.0.0.1", 0), _H))
        return self

    def __enter__(self) -> "StandIn":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _dispatch(self, req: Request) -> tuple[int, Any, dict[str, str]]:
        for method, pattern, handler in self.routes:
            m = re.fullmatch(pattern, req.path)
            if method == req.method and m:
                try:
                    out = handler(req, m)
                except BadRequest as exc:
                    return 400, google_error(400, str(exc)), {}
                return (out[0], out[1], dict(out[2])) if len(out) == 3 else (out[0], out[1], {})
        return 404, google_error(404, f"stand-in has no route for {req.method} {req.path}"), {}

    def calls(self, method: str, pattern: str) -> list[Request]:
        return [r for r in self.requests if r.method == method and re.search(pattern, r.path)]


def decode_query(req: "Request", message_class, path_fields: dict[str, Any] | None = None):
    """A GET's query parameters (and the fields the path binds) as ``message_class`` (proto-plus), parsed
    strictly like the real API: a parameter that is no field of the request is a 400 ("Cannot bind query
    parameter"); ``$alt`` (the REST transport's encoding choice) is the system's own."""
    from google.protobuf import json_format

    fields = {f.json_name: f for f in message_class.pb().DESCRIPTOR.fields}
    fields.update({f.name: f for f in message_class.pb().DESCRIPTOR.fields})
    body: dict[str, Any] = dict(path_fields or {})
    for name, values in req.query.items():
        if name.startswith("$"):
            continue
        field = fields.get(name)
        if field is None:
            raise BadRequest(f'Invalid JSON payload received. Unknown name "{name}": Cannot bind query parameter. '
                             f"Field '{name}' could not be found in request message.")
        repeated = field.is_repeated if hasattr(type(field), "is_repeated") else field.label == field.LABEL_REPEATED
        body[field.json_name] = list(values) if repeated else values[-1]
        if field.type in (field.TYPE_INT32, field.TYPE_INT64) and not repeated:
            body[field.json_name] = int(values[-1])
    return decode(req, message_class, body)
