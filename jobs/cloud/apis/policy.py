"""The client policy: how long a cloud call may take and how often it is tried, as data.

**Policy** (:class:`Policy`, read from the environment by :func:`policy`, the one env reader):

* every attempt has a connect and a read timeout (``VTP_CLOUD_CONNECT_TIMEOUT_S`` 10,
  ``VTP_CLOUD_READ_TIMEOUT_S`` 10), each capped by what is left of the call's budget, so no attempt runs
  past it; GAPIC clients use the REST transport so that both apply (gRPC has one deadline per call);
* retries with exponential backoff and full jitter (google-api-core's ``exponential_sleep_generator``:
  first delay ``VTP_CLOUD_RETRY_FIRST_S`` 1, doubling up to ``VTP_CLOUD_RETRY_MAX_S`` 30) within a budget of
  ``VTP_CLOUD_RETRY_TOTAL_S`` (120) seconds per call, attempts included (:func:`retried`);
* every retry is one ``warning:`` line on stderr the moment the failure is seen: the service, what was being
  done, what failed, the delay before the next try, when it gives up (:func:`retry_line`). The first
  failure of any kind is seen within 10 s (refused, 429, 5xx at once; silence at the read timeout; no
  connection at the connect timeout, per address tried), so nothing waits in silence longer than that
  (name resolution is the system resolver's and is not bounded here);
* what is retried (:data:`READ`, :data:`CREATE_OWN_ID`, :data:`CREATE_SERVER_ID`): reads, and creates whose
  id the client chose (a pipeline job's ``pipelineJobId``, an object at a content-addressed name, a
  template of the same bytes: a repeat either succeeds or answers "already exists"), on 429, 5xx, a dropped
  connection, no answer in time, or no connection at all. Creates whose id the server assigns (Cloud Build
  builds, CustomJobs, model uploads) are retried only when the failure proves nothing was created (429,
  or no connection was made): after a 5xx or a connection dropped once the request was sent, a repeat
  could run the work twice, so the one line says what may exist and the command that lists it;
* long-running resources are polled at most every ``VTP_CLOUD_POLL_S`` (20) seconds;
* a submit's create, with everything the command did before it, ends within ``VTP_CLOUD_COMMAND_S`` (120) seconds
  of the command's start (``jobs.cloud.apis.clients.within``).

This module is the policy's data and its one env reader; the loop that applies it to every call is
``jobs.cloud.apis.clients`` (``retried``, ``call``, ``http``), what a retry or a give-up says is ``jobs.cloud.apis.lines``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from jobs.rules.errors import CloudError

#: what a call is, for what may be repeated (see the module docstring: who picks the id decides)
READ, CREATE_OWN_ID, CREATE_SERVER_ID = "read", "create-own-id", "create-server-id"


@dataclass(frozen=True)
class Policy:
    """The client policy (module docstring). ``read_s`` defaults to 10 s, below the 15 s by which a person
    must see a first line whatever the fault: a silent endpoint is then reported at 10 s, a refused or
    throttled call at once. The APIs we call answer in about a second (a create returns the job or an
    operation at once, the work happens after), and the read timeout bounds silence between two reads, not
    the length of a transfer, so 10 s of silence already is the fault; a timer thread printing "still
    waiting" beside a longer read timeout would say the same later, with more code. ``total_s`` (120 s) is
    one call's whole budget, attempts included. ``command_s`` (120 s) bounds a submit's create counted from the
    command's start, the start-up and compiling before it included (``jobs.cloud.apis.clients.within``)."""
    connect_s: float = 10.0
    read_s: float = 10.0
    total_s: float = 120.0
    first_s: float = 1.0
    max_s: float = 30.0
    poll_s: float = 20.0
    command_s: float = 120.0

    @property
    def timeout(self) -> tuple[float, float]:
        """``(connect, read)`` as ``requests`` takes it."""
        return self.connect_s, self.read_s

    def attempt_timeout(self, left_s: float) -> tuple[float, float]:
        """``(connect, read)`` for an attempt with ``left_s`` of the budget left: never past the budget (the
        caller starts no attempt with less than :data:`MIN_ATTEMPT_S` left)."""
        left_s = max(left_s, 0.001)
        return min(self.connect_s, left_s), min(self.read_s, left_s)


#: the policy's environment variables -> Policy field (docs/vertex.md "Credentials, timeouts, retries")
POLICY_ENV = {"VTP_CLOUD_CONNECT_TIMEOUT_S": "connect_s", "VTP_CLOUD_READ_TIMEOUT_S": "read_s",
              "VTP_CLOUD_RETRY_TOTAL_S": "total_s", "VTP_CLOUD_RETRY_FIRST_S": "first_s",
              "VTP_CLOUD_RETRY_MAX_S": "max_s", "VTP_CLOUD_POLL_S": "poll_s", "VTP_CLOUD_COMMAND_S": "command_s"}


#: no attempt is started with less of the budget left than this (it could only fail for want of time, and
#: its failure would hide the real one)
MIN_ATTEMPT_S = 0.25


def policy() -> Policy:
    """The policy from the environment (production defaults when unset); a bad value is one line."""
    values = {}
    for variable, field in POLICY_ENV.items():
        raw = os.environ.get(variable)
        if raw is None or raw == "":
            continue
        try:
            value = float(raw)
        except ValueError:
            value = -1.0
        if not value > 0 or value != value or value == float("inf"):
            raise CloudError(f"{variable}={raw!r}: expected a number of seconds > 0, e.g. "
                             f"{getattr(Policy, field):g}")
        values[field] = value
    return Policy(**values)
