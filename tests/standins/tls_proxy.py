"""Make ``https://<host>/...`` reach a local stand-in, for clients whose https host cannot be configured.

Some clients cannot be pointed elsewhere (GCPC's launchers, google-auth's token refresh at
oauth2.googleapis.com), and the credentials rule (``jobs.cloud.apis.credentials.may_receive_google_token``) is
decided on the real scheme and host name, so a test of it must speak https to the real names.
:class:`TlsProxy` is an HTTP ``CONNECT`` proxy on 127.0.0.1 that terminates TLS with a self-signed
certificate for the given host names and hands the decrypted request to the :class:`~tests.standins.base.StandIn`
mapped to that host (one stand-in for all, or ``{host: standin}``; a host not in the map is refused, so
nothing real is ever reached). A client process run with :meth:`TlsProxy.env` (``HTTPS_PROXY``,
``NO_PROXY=127.0.0.1,localhost``, ``SSL_CERT_FILE`` / ``REQUESTS_CA_BUNDLE``) then really speaks https to
"REGION-kfp.pkg.dev", verified, and the stand-in records the request with its ``Host`` header.
"""
from __future__ import annotations

import datetime
import socketserver
import ssl
from pathlib import Path

from tests.standins.base import LoopbackServer, StandIn


def self_signed(hostnames: list[str], directory: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostnames[0])])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(h) for h in hostnames]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = directory / "standin-cert.pem", directory / "standin-key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, key_file


class TlsProxy(LoopbackServer):
    def __init__(self, standin: "StandIn | dict[str, StandIn]", hostnames: list[str] | None, directory: Path):
        self.standins = dict(standin) if isinstance(standin, dict) else {h: standin for h in hostnames or []}
        hostnames = list(self.standins)
        self.cert_file, key_file = self_signed(hostnames, directory)
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.load_cert_chain(self.cert_file, key_file)
        self.connects: list[str] = []

    def start(self) -> "TlsProxy":
        proxy = self

        class _Connect(socketserver.StreamRequestHandler):
            def handle(self):
                line = self.rfile.readline().decode("latin-1").split()
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                if len(line) < 2 or line[0] != "CONNECT":
                    self.wfile.write(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
                    return
                proxy.connects.append(line[1])
                target = proxy.standins.get(line[1].rsplit(":", 1)[0])
                if target is None:  # never reach anything real
                    self.wfile.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
                    return
                self.wfile.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                self.wfile.flush()
                try:
                    tls = proxy.context.wrap_socket(self.request, server_side=True)
                except (ssl.SSLError, OSError):  # a client that does not trust us: it reports the failure
                    return
                server = target.server
                try:
                    server.RequestHandlerClass(tls, self.client_address, server)
                except (ssl.SSLError, OSError):  # the client hung up (a fault test)
                    pass

        self._serve(socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Connect))
        return self

    def env(self) -> dict[str, str]:
        """What a client process needs to go through this proxy and trust its certificate."""
        return {"HTTPS_PROXY": self.url, "https_proxy": self.url, "NO_PROXY": "127.0.0.1,localhost",
                "no_proxy": "127.0.0.1,localhost", "SSL_CERT_FILE": str(self.cert_file),
                "REQUESTS_CA_BUNDLE": str(self.cert_file)}
