"""THE forms of Google Cloud resource names and identifiers, checked before any use of one: a project, a region, a
bucket, a service account, a VPC network, a Vertex job's resource name. A name typed by the user, read from a job
file or read back from a file this product wrote (``vertex_jobs.json``, a ``gcp_resources`` file) is used (in a URL,
a request, a Cloud Logging filter) only once it matches its form here.

Each form is matched whole (:func:`fits`: ``re.fullmatch`` on a ``str``): ``$`` in ``re.match`` also matches before
a trailing newline, so ``'my-project\\n'`` passed a ``^...$`` pattern.

Sources (read 2026-11-29): project ids "6 to 30 lowercase letters, digits, or hyphens; start with a letter; cannot
end with a hyphen" (Resource Manager, "Creating and managing projects"), with the legacy domain-scoped form
``example.com:my-project``; bucket names (Cloud Storage "Bucket naming": 3-63 characters, 222 with dots); a
service account email ``NAME@PROJECT.iam.gserviceaccount.com`` (NAME 6-30 characters), the Compute Engine default
``NUMBER-compute@developer.gserviceaccount.com`` and App Engine's ``PROJECT@appspot.gserviceaccount.com``;
``CustomJobSpec.network`` "``projects/{project}/global/networks/{network}`` where {project} is a project number";
a Vertex job's name ``projects/{project}/locations/{location}/customJobs/{custom_job}`` (and
``hyperparameterTuningJobs``), whose id Vertex assigns as a number.
"""
from __future__ import annotations

import re
from typing import Any

PROJECT_ID = r"(?:[a-z][a-z0-9.-]*[a-z0-9]:)?[a-z][a-z0-9-]{4,28}[a-z0-9]"
PROJECT_NUMBER = r"[0-9]{1,20}"
REGION = r"[a-z]+-[a-z]+[0-9]+"
#: a job's id as Vertex assigns it (an int64, in decimal)
JOB_ID = r"[0-9]{1,20}"

PROJECT_RE = re.compile(PROJECT_ID)
PROJECT_NUMBER_RE = re.compile(PROJECT_NUMBER)
REGION_RE = re.compile(REGION)
BUCKET_RE = re.compile(r"[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]")
SERVICE_ACCOUNT_RE = re.compile(r"[a-z][a-z0-9-]{4,28}[a-z0-9]@[a-z][a-z0-9.-]{4,60}[a-z0-9]\.iam\.gserviceaccount\.com"
                                r"|[0-9]+-compute@developer\.gserviceaccount\.com"
                                r"|[a-z][a-z0-9-]{4,28}[a-z0-9]@appspot\.gserviceaccount\.com")
NETWORK_RE = re.compile(r"projects/[0-9]{1,20}/global/networks/[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?")
#: a Vertex job's resource name; groups: project, location, collection, id
JOB_NAME_RE = re.compile(rf"projects/(?P<project>{PROJECT_ID}|{PROJECT_NUMBER})/locations/(?P<location>{REGION})/"
                         rf"(?P<collection>customJobs|hyperparameterTuningJobs)/(?P<id>{JOB_ID})")


def fits(pattern: re.Pattern, value: Any) -> bool:
    """Whether ``value`` is a string of the whole form ``pattern`` (never a prefix of it, never with a newline)."""
    return isinstance(value, str) and pattern.fullmatch(value) is not None


def service_account_problem(value: str) -> str | None:
    """Why ``value`` is not a service account's email (None when it is): the reason, for a field's one line."""
    if fits(SERVICE_ACCOUNT_RE, value):
        return None
    if value.startswith("serviceAccount:"):
        return (f"{value!r} is an IAM member, not a service account's email: drop the 'serviceAccount:' prefix "
                f"({value[len('serviceAccount:'):]})")
    return f"{value!r} is not a service account's email"


def network_problem(value: str) -> str | None:
    """Why ``value`` is not a VPC network's full name as Vertex takes it (None when it is)."""
    if fits(NETWORK_RE, value):
        return None
    if re.fullmatch(r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?", value or ""):
        return (f"{value!r} is not a VPC network's full name (a short name: Vertex wants "
                f"projects/PROJECT_NUMBER/global/networks/{value})")
    return f"{value!r} is not a VPC network's full name (Vertex wants the project number, not its id)"
