"""The job side's errors that end what it was doing with one line meant for a person, no traceback.

* :class:`CloudError`: a cloud call (or anything the cloud side does for a command) cannot go on; the
  clients (``jobs.cloud``) raise it with the service, the resource, what happened and what to do;
* :class:`BuildError`: an image that cannot be named, built or pushed (a bad reference, a context, a
  build); a CloudError, so a command that says "error: ..." for one says it for the other.

Both live here, below everything that raises them, because the spec (the image reference a job runs) and
the clients both need them. Bad *configuration* is ``jobfile.errors.ConfigError`` (one problem per field).
"""
from __future__ import annotations


class CloudError(Exception):
    """A cloud call that cannot go on; ``str(exc)`` is one line meant for a person."""


class BuildError(CloudError):
    """A bad image reference, or a build or push that cannot go on; ``str(exc)`` is one line meant for a person."""
