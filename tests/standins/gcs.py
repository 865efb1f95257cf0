"""The Cloud Storage JSON API, as much of it as google-cloud-storage uses to upload an object.

Routes are what the real client was seen to request (storage 3.17):

* ``GET /storage/v1/b/B`` bucket metadata (its ``location``: ``Gcs(standin, buckets={"b": "EUROPE-WEST4"})``):
  the client's background bucket-metadata cache asks this on the first upload to a bucket, ``get_bucket`` for
  a bucket's location; a missing bucket -> 404.
* ``POST /upload/storage/v1/b/B/o?uploadType=multipart`` (files <= 8 MiB): a ``multipart/related`` body,
  JSON metadata then the bytes; ``uploadType=media`` (name in the query) is accepted too.
* ``POST ...?uploadType=resumable`` (larger files): metadata only, answered with a ``Location`` session
  URL; then ``PUT`` of the bytes with ``Content-Range``; ``308`` until the last chunk.
* ``GET /storage/v1/b/B/o/NAME`` object metadata.

Install it on a :class:`~tests.standins.base.StandIn` (one server can hold several APIs, as the product
points every API at one ``--api-endpoint``): ``gcs = Gcs(standin, buckets={"b"})``; uploaded objects are in
``gcs.objects[(bucket, name)] = (metadata, bytes)``.
"""
from __future__ import annotations

import base64
import hashlib
import itertools
import json
import re
from urllib.parse import unquote

import google_crc32c

from tests.standins.base import Request, StandIn, google_error


#: the fields of the JSON API's Object resource (https://cloud.google.com/storage/docs/json_api/v1/objects):
#: google-cloud-storage has no typed message for it, so the stand-in checks names as the real API does
#: ("Invalid JSON payload received. Unknown name ...": 400)
OBJECT_FIELDS = frozenset("""acl bucket cacheControl componentCount contentDisposition contentEncoding contentLanguage
contentType contexts crc32c customTime customerEncryption etag eventBasedHold generation hardDeleteTime id kind
kmsKeyName md5Hash mediaLink metadata metageneration name owner restoreToken retention retentionExpirationTime
selfLink size softDeleteTime storageClass temporaryHold timeCreated timeDeleted timeFinalized
timeStorageClassUpdated updated""".split())


def check_object(meta: dict) -> None:
    from tests.standins.base import BadRequest

    unknown = sorted(set(meta) - OBJECT_FIELDS) if isinstance(meta, dict) else ["(not an object)"]
    if unknown:
        raise BadRequest(f'Invalid JSON payload received. Unknown name "{unknown[0]}": Cannot find field.')


def header(req: Request, name: str) -> str:
    """A request header, whatever case the client wrote it in."""
    return next((v for k, v in req.headers.items() if k.lower() == name.lower()), "")


def split_multipart(req: Request) -> tuple[dict, bytes, str]:
    """(metadata JSON, media bytes, media content type) of a ``multipart/related`` upload body."""
    m = re.search(r'boundary="?([^";]+)"?', header(req, "Content-Type"))
    assert m, f"multipart upload without a boundary: {header(req, 'Content-Type')!r}"
    parts = req.body.split(b"--" + m.group(1).encode())[1:-1]  # drop the preamble and the closing '--'
    assert len(parts) == 2, f"expected metadata + media parts, got {len(parts)}"
    heads, payloads = zip(*(p.split(b"\r\n\r\n", 1) for p in parts))
    media_type = re.search(rb"(?im)^content-type:\s*([^\r\n;]+)", heads[1])
    return json.loads(payloads[0][:-2]), payloads[1][:-2], media_type.group(1).decode() if media_type else ""


class Gcs:
    def __init__(self, standin: StandIn, buckets: set[str] | frozenset[str] | dict[str, str] = frozenset({"b"})):
        self.standin = standin
        self.buckets = set(buckets)
        #: bucket -> its location as Cloud Storage names it (``US``, ``EUROPE-WEST4``...): ``buckets`` given as a
        #: mapping, else ``US`` (the API's default for a new bucket)
        self.locations = dict(buckets) if isinstance(buckets, dict) else {b: "US" for b in buckets}
        self.objects: dict[tuple[str, str], tuple[dict, bytes]] = {}
        self._sessions: dict[str, tuple[str, dict, bytearray]] = {}
        self._ids = itertools.count(1)
        standin.route("GET", r"/storage/v1/b/([^/]+)", self._get_bucket)
        standin.route("POST", r"/upload/storage/v1/b/([^/]+)/o", self._insert)
        standin.route("PUT", r"/upload/storage/v1/b/([^/]+)/o", self._put_chunk)
        standin.route("GET", r"/storage/v1/b/([^/]+)/o/(.+)", self._get_object)

    def _missing(self, bucket: str):
        return 404, google_error(404, "The specified bucket does not exist.")

    def _get_bucket(self, req: Request, m: re.Match):
        if m.group(1) not in self.buckets:
            return self._missing(m.group(1))
        location = self.locations.get(m.group(1), "US")
        return 200, {"kind": "storage#bucket", "name": m.group(1), "id": m.group(1), "location": location,
                     "locationType": "multi-region" if "-" not in location else "region", "storageClass": "STANDARD"}

    def _get_object(self, req: Request, m: re.Match):
        key = (m.group(1), unquote(m.group(2)))
        if key not in self.objects:
            return 404, google_error(404, f"No such object: {key[0]}/{key[1]}")
        return 200, self.objects[key][0]

    def _store(self, bucket: str, meta: dict, data: bytes):
        check_object(meta)
        name = meta["name"]
        crc = base64.b64encode(google_crc32c.Checksum(bytes(data)).digest()).decode()
        if meta.get("crc32c", crc) != crc:  # the real server refuses bytes that do not match their checksum
            return 400, google_error(400, "Provided CRC32C does not match the uploaded data")
        resource = {"kind": "storage#object", "bucket": bucket, "name": name, "size": str(len(data)),
                    "generation": str(next(self._ids)), "contentType": meta.get("contentType", ""),
                    "md5Hash": base64.b64encode(hashlib.md5(data).digest()).decode(), "crc32c": crc}
        self.objects[(bucket, name)] = (resource, bytes(data))
        return 200, resource

    def _insert(self, req: Request, m: re.Match):
        bucket = m.group(1)
        if bucket not in self.buckets:
            return self._missing(bucket)
        kind = req.query.get("uploadType", [""])[0]
        if kind == "multipart":
            meta, data, media_type = split_multipart(req)
            meta.setdefault("contentType", media_type)
            return self._store(bucket, meta, data)
        if kind == "media":
            return self._store(bucket, {"name": req.query["name"][0]}, req.body)
        if kind == "resumable":
            meta = req.json() or {"name": req.query["name"][0]}
            check_object(meta)
            upload_id = str(next(self._ids))
            self._sessions[upload_id] = (bucket, meta, bytearray())
            location = f"{self.standin.url}/upload/storage/v1/b/{bucket}/o?uploadType=resumable&upload_id={upload_id}"
            return 200, {}, {"Location": location}
        return 400, google_error(400, f"unsupported uploadType {kind!r}")

    def _put_chunk(self, req: Request, m: re.Match):
        upload_id = req.query.get("upload_id", [""])[0]
        if upload_id not in self._sessions:
            return 404, google_error(404, f"no upload session {upload_id!r}")
        bucket, meta, data = self._sessions[upload_id]
        rng = re.fullmatch(r"bytes (?:(\d+)-(\d+)|\*)/(\d+|\*)", header(req, "Content-Range"))
        assert rng, f"bad Content-Range {header(req, 'Content-Range')!r}"
        if rng.group(1) is not None:
            assert int(rng.group(1)) == len(data), "chunk does not continue where the last one ended"
        data.extend(req.body)
        if rng.group(3) != "*" and len(data) == int(rng.group(3)):
            del self._sessions[upload_id]
            return self._store(bucket, meta, bytes(data))
        return 308, b"", {"Range": f"bytes=0-{len(data) - 1}"}
