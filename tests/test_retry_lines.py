"""Nothing waits in silence: every retry of a cloud call is one ``warning:`` line the moment the failure is
seen, the first within 15 s of the call whatever the fault, and a call that keeps failing ends in one
``error:`` line within its budget (120 s by default), naming the resource and how to look for it.

Time is the module clock of ``jobs.cloud.apis.clients`` (``monotonic``/``wall_time``/``sleep``), replaced by
:class:`Clock`: the policy's sleeps only move it forward (no test sleeps through a backoff), real time spent
in an attempt still counts. Two kinds of test:

* the default policy (no ``VTP_CLOUD_*`` variable) with attempts that fail on the fake clock: a refusal or a
  503 at once, an endpoint that never answers after the attempt's own read (or connect) timeout. These
  show the production numbers (first line at 0 s or 10 s, give-up within 120 s, no attempt past the budget);
* every retrying call kind through the real product code and client libraries against the stand-ins
  (tests/standins): a read (following a pipeline job), a create with our id (a pipeline job), a create with
  the server's id (a model upload), ``clients.http`` (a template upload); each against a stand-in that
  answers 503, a port that refuses, and a stand-in that never answers. 503 and refusals run the default
  policy (the sleeps are fake, the attempts real and instant); the never-answering stand-in runs a short
  policy (0.2 s read timeout, 0.7 s budget), since its attempts take real time.
"""
from __future__ import annotations

import base64
import re
import socket
import time

import pytest
import requests
from google.api_core import exceptions as core

from jobs.cloud.apis import clients
from jobs.cloud.apis.policy import CREATE_OWN_ID, CREATE_SERVER_ID, POLICY_ENV, Policy, READ, policy
from jobs.cloud.apis.lines import describe, failure_line, run_command, seconds
from jobs.cloud.apis.credentials import client_kwargs
from tests.standins.base import StandIn
from tests.standins.vertex import VertexStandIn

WALL0 = 1_800_000_000.0  # the wall clock when a test's call starts (a whole second: "gives up by" is exact)
PROJECT, REGION = "my-proj", "europe-west4"
NAME = f"projects/{PROJECT}/locations/{REGION}/pipelineJobs/flowers-20261124-abcd"
TOKEN = "ya29.RETRY-LINES-FAKE-TOKEN-5e1f"
PASSWORD = "s3cret-pw-8c2d"
SECRETS = (TOKEN, PASSWORD, base64.b64encode(f"user:{PASSWORD}".encode()).decode())
SHORT = {"VTP_CLOUD_CONNECT_TIMEOUT_S": "0.2", "VTP_CLOUD_READ_TIMEOUT_S": "0.2", "VTP_CLOUD_RETRY_TOTAL_S": "0.7",
         "VTP_CLOUD_RETRY_FIRST_S": "0.05", "VTP_CLOUD_RETRY_MAX_S": "0.2"}
LINE = re.compile(r"warning: (?P<service>[^:]+): (?P<doing>.+?): (?P<what>.+); next try \((?P<n>\d+)\) in "
                  r"(?P<delay>[\d.]+) s, gives up by (?P<by>\d\d:\d\d:\d\d) \((?P<left>[\d.]+) s left\)")


class Clock:
    """``clients``' clock: what the policy slept (sleeps are not slept) and what fake attempts took, plus real
    monotonic time when ``real`` (attempts over sockets); records each retry line and each sleep with the
    clock's time, relative to :meth:`start`."""

    def __init__(self, real: bool = True):
        self.real, self.offset, self.t0, self.events = real, 0.0, 0.0, []

    def monotonic(self) -> float:
        return (time.monotonic() if self.real else 0.0) + self.offset

    def wall_time(self) -> float:
        return WALL0 + (self.monotonic() - self.t0)

    def sleep(self, seconds: float) -> None:
        self.events.append(("sleep", self.now(), seconds))
        self.offset += seconds

    def say(self, line: str) -> None:
        self.events.append(("line", self.now(), line))
        self.said(line)

    def advance(self, seconds: float) -> None:
        self.offset += seconds

    def start(self) -> None:
        self.t0 = self.monotonic()

    def now(self) -> float:
        return self.monotonic() - self.t0

    def lines(self) -> list[tuple[float, str]]:
        return [(t, text) for kind, t, text in self.events if kind == "line"]

    def sleeps(self) -> list[float]:
        return [d for _, d in self.sleeps_at()]

    def sleeps_at(self) -> list[tuple[float, float]]:
        """(when, how long) of each sleep."""
        return [(t, d) for kind, t, d in self.events if kind == "sleep"]


def use(monkeypatch, c: Clock) -> Clock:
    """``c`` as ``clients``' clock; its start moves to the moment the first cloud call starts (what the
    promises count from: the product first builds its client, which takes real time)."""
    c.said = clients.say  # lines still go to stderr: the test reads them there too
    for name in ("monotonic", "wall_time", "sleep", "say"):
        monkeypatch.setattr(clients, name, getattr(c, name))
    retried, c.calls = clients.retried, 0

    def first_call_starts_the_clock(*args, **kwargs):
        if not c.calls:
            c.start()
        c.calls += 1
        return retried(*args, **kwargs)

    monkeypatch.setattr(clients, "retried", first_call_starts_the_clock)
    return c


@pytest.fixture
def clock(monkeypatch):
    """Real time plus the policy's sleeps: for attempts over real sockets."""
    return use(monkeypatch, Clock(real=True))


@pytest.fixture
def fake_clock(monkeypatch):
    """Only the fake attempts' time and the policy's sleeps: exact."""
    return use(monkeypatch, Clock(real=False))


@pytest.fixture
def default_policy(monkeypatch):
    for key in POLICY_ENV:
        monkeypatch.delenv(key, raising=False)
    return policy()


def short_policy(monkeypatch) -> Policy:
    for key, value in SHORT.items():
        monkeypatch.setenv(key, value)
    return policy()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_lines(clock: Clock, p: Policy, service: str, doing: str, what: str) -> list[tuple[float, str]]:
    """One line per retry, each before its sleep and carrying that sleep's delay; ``service: doing: what``
    (``doing`` and ``what`` are patterns); the give-up time is the start plus the budget, the seconds left
    what the clock says (within the line's rounding). Returns the lines."""
    kinds = [kind for kind, _, _ in clock.events]
    assert kinds == ["line", "sleep"] * (len(kinds) // 2), kinds
    lines = clock.lines()
    by = time.strftime("%H:%M:%S", time.localtime(WALL0 + p.total_s))
    for n, ((t, text), delay) in enumerate(zip(lines, clock.sleeps()), start=2):
        m = LINE.fullmatch(text)
        assert m, text
        assert (m["service"], m["n"], m["by"]) == (service, str(n), by), text
        assert re.fullmatch(doing, m["doing"]) and re.fullmatch(what, m["what"]), text
        assert m["delay"] == seconds(delay), (text, delay)  # the delay that was then slept
        assert abs(float(m["left"]) - (p.total_s - t)) <= 0.55, (text, t)  # the line rounds to whole seconds
    return lines


def error_line(capsys, rc: int) -> str:
    """The command's stderr: retry lines (``warning:``) then exactly one ``error:`` line, exit 1."""
    err = capsys.readouterr().err
    assert rc == 1, err
    assert "Traceback" not in err
    *warnings, last = err.strip().splitlines()
    assert all(w.startswith("warning: ") for w in warnings), err
    assert last.startswith("error: "), err
    for secret in SECRETS:
        assert secret not in err
    return last


# ---- the default policy on a fake clock -----------------------------------------------------------------

def failing(clock: Clock, fault: str, attempts: list):
    """An attempt that fails like ``fault``: at once (503, refused), or after the attempt's own timeout."""
    def attempt(timeout):
        attempts.append((clock.now(), timeout))
        if fault == "503":
            raise core.ServiceUnavailable("POST http://h/v1/x: the service is unavailable")
        if fault == "429":
            raise core.TooManyRequests("quota exceeded")
        if fault == "refused":
            raise requests.exceptions.ConnectionError("HTTPConnectionPool(host='h', port=1): [Errno 111] "
                                                      "Connection refused")
        if fault == "hang":
            clock.advance(timeout[1])
            raise requests.exceptions.ReadTimeout("read timed out")
        clock.advance(timeout[0])  # "blackhole": the connection never completes
        raise requests.exceptions.ConnectTimeout("connect timed out")
    return attempt


@pytest.mark.parametrize("kind", [READ, CREATE_OWN_ID])
@pytest.mark.parametrize("fault, first_at, what", [
    ("503", 0, r"503 the service is unavailable"),
    ("429", 0, r"429 quota exceeded"),
    ("refused", 0, r"cannot connect to the server \(connection refused\)"),
    ("hang", 10, r"no answer from the server within 10 s"),
    ("blackhole", 10, r"cannot connect to the server \(no connection within 10 s\)"),
])
def test_default_policy_first_line_by_15_s_and_give_up_within_120_s(fake_clock, default_policy, kind, fault, first_at,
                                                                      what):
    p, attempts = default_policy, []
    assert (p.connect_s, p.read_s, p.total_s) == (10, 10, 120)
    with pytest.raises(core.RetryError) as gave_up:
        clients.retried(failing(fake_clock, fault, attempts), kind=kind, doing="creating thing T", service="Vertex AI")
    ended = fake_clock.now()
    lines = check_lines(fake_clock, p, "Vertex AI", "creating thing T", what)
    assert lines and lines[0][0] == pytest.approx(first_at, abs=0.05) and lines[0][0] <= 15
    assert len(lines) == len(attempts) - 1  # one line per retry, none for the last failure (the error says it)
    assert ended <= p.total_s
    for started, timeout in attempts:
        assert started + max(timeout) <= p.total_s + 1e-6, (started, timeout)  # no attempt past the budget
    line = failure_line(gave_up.value, "creating thing T", "it may exist: see T")
    assert line.startswith("creating thing T: gave up after retrying for 120 s: ")
    assert line.endswith("; it may exist: see T")


@pytest.mark.parametrize("fault, retried, ends_at", [("503", False, 0), ("hang", False, 10), ("refused", True, None),
                                                     ("429", True, None)])
def test_default_policy_create_with_a_server_id(fake_clock, default_policy, fault, retried, ends_at):
    """A server-assigned id: repeated only when nothing can have been created (429, refused); else one line
    at once (503) or after the read timeout (no answer)."""
    attempts = []
    with pytest.raises(Exception) as failed:
        clients.retried(failing(fake_clock, fault, attempts), kind=CREATE_SERVER_ID, doing="creating job",
                        service="Vertex AI")
    assert (len(attempts) > 1) == retried and len(fake_clock.lines()) == len(attempts) - 1
    assert isinstance(failed.value, core.RetryError) == retried
    if ends_at is not None:
        assert fake_clock.now() == pytest.approx(ends_at, abs=0.05)
    assert fake_clock.now() <= 120


def test_an_attempt_never_runs_past_the_budget(fake_clock, monkeypatch):
    """Budget 25 s, read timeout 10 s: the third attempt gets only what is left."""
    monkeypatch.setenv("VTP_CLOUD_RETRY_TOTAL_S", "25")
    monkeypatch.setenv("VTP_CLOUD_RETRY_FIRST_S", "1")
    monkeypatch.delenv("VTP_CLOUD_READ_TIMEOUT_S", raising=False)
    monkeypatch.delenv("VTP_CLOUD_CONNECT_TIMEOUT_S", raising=False)
    attempts = []
    with pytest.raises(core.RetryError) as gave_up:
        clients.retried(failing(fake_clock, "hang", attempts), doing="reading R")
    assert [t for _, (_, t) in attempts][:2] == [10, 10]
    last_start, (_, last) = attempts[-1]
    assert last < 10 and last_start + last == pytest.approx(25, abs=1e-6) and fake_clock.now() <= 25 + 1e-6
    # the give-up sums the tries up with the longest wait; the last try's remainder would read as the timeout
    assert describe(gave_up.value) == ("gave up after retrying for 25 s: no answer from the server within "
                                               "10 s")


def test_the_retry_decorator_keeps_working_with_lines(fake_clock, default_policy):
    calls = []

    def flaky(x):
        calls.append(x)
        if len(calls) < 3:
            raise core.ServiceUnavailable("busy")
        return x * 2

    assert clients.retry(READ, doing="checking X", service="Docker engine")(flaky)(21) == 42
    assert [LINE.fullmatch(t)["n"] for _, t in fake_clock.lines()] == ["2", "3"]
    assert all(t.startswith("warning: Docker engine: checking X: 503 busy; next try") for _, t in fake_clock.lines())


def test_the_policys_defaults_keep_the_promises(default_policy):
    assert max(default_policy.timeout) <= 15 and default_policy.total_s <= 120


def test_a_line_names_no_user_info_of_a_url(default_policy):
    exc = requests.exceptions.ReadTimeout("x", request=requests.Request("GET", f"http://user:{PASSWORD}@h.example:81/p"
                                                                        ).prepare())
    assert describe(exc) == "no answer from h.example:81 within 10 s"


# ---- every retrying call kind, through the product code, against the stand-ins ----------------------------

@pytest.fixture
def token_credentials(monkeypatch):
    """GAPIC clients send a bearer token even to the stand-in (http, loopback), so that a line that printed a
    header or a request would show it; the product's own rule gives loopback anonymous credentials."""
    from google.oauth2.credentials import Credentials

    from jobs.cloud.apis import credentials

    monkeypatch.setattr(credentials, "credentials", lambda endpoint=None, what="": Credentials(token=TOKEN))


def server(fault: str):
    """(endpoint URL, stand-in or None): 503 / never answers on every request, or a port that refuses."""
    if fault == "refused":
        return f"http://127.0.0.1:{closed_port()}", None
    standin = VertexStandIn().start()
    standin.fault(503 if fault == "503" else "hang", times=None)
    return standin.url, standin


def follow(url):
    from google.cloud import aiplatform_v1

    from jobs.cloud.apis import vertex

    client = aiplatform_v1.PipelineServiceClient(**client_kwargs(url, "Vertex AI"))
    vertex.follow(client, NAME, poll_s=0.05, log=lambda line: None, sleep=lambda s: None)


def create_pipeline_job(url):
    from google.cloud import aiplatform_v1

    from jobs.cloud.apis import vertex

    vertex.submit_pipeline(aiplatform_v1.PipelineJob(display_name="flowers"), project=PROJECT, location=REGION,
                           job_id=NAME.rsplit("/", 1)[1], api_endpoint=url, log=lambda line: None)


def upload_model(url):
    from jobs.cloud.apis import vertex

    vertex.upload_model({"parent": f"projects/{PROJECT}/locations/{REGION}", "model": {"displayName": "flowers"}},
                        REGION, api_endpoint=url, log=lambda line: None, sleep=lambda s: None)


def upload_template(url):
    """``clients.http`` as templates.upload calls it, with user info in the URL and a Google token offered (the
    loopback URL gets no token; the user info goes as Basic credentials): neither may reach a line."""
    host = url.replace("http://", f"http://user:{PASSWORD}@") + "/my-proj/pipelines"
    clients.http("POST", host, kind=CREATE_OWN_ID, doing=f"uploading the template to {url}/my-proj/pipelines",
                 service="Artifact Registry", google_token=TOKEN, files={"content": ("p.yaml", b"pipelineInfo: {}")},
                 unsure="the same bytes can be uploaded again safely")


HOST = r"127\.0\.0\.1:\d+"
HINT = r"see or cancel it at https://console\.cloud\.google\.com/\S+ \(REST: GET \S+, POST \.\.\.:cancel\)"
KINDS = {  # name -> (product call, service, doing, what follows the failure in the error line, retried on 5xx/timeout)
    "read": (follow, "Vertex AI", f"reading pipeline job {NAME}", f"the job may still be running: {HINT}", True),
    "create-own-id": (create_pipeline_job, "Vertex AI", f"creating pipeline job {NAME}",
                      f"it may exist even so: {HINT}", True),
    "create-server-id": (upload_model, "Vertex AI", "uploading the model to the Model Registry",
                         r"a model may have been registered even so: gcloud ai models list --region europe-west4 "
                         r"--project my-proj --filter=display_name=flowers", False),
    "http": (upload_template, "Artifact Registry",
             r"uploading the template to http://127\.0\.0\.1:\d+/my-proj/pipelines",
             "the same bytes can be uploaded again safely", True),
}
SLACK = 0.5  # seconds of real time for a request and its handling on a busy 2-core machine (seen: < 0.1 s)
WHAT = {"503": r"503 stand-in fault 503", "refused": rf"cannot connect to {HOST} \(connection refused\)",
        "hang": rf"no answer from {HOST} within 0\.2 s"}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("fault", ["503", "refused", "hang"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_every_call_kind_says_each_retry_and_ends_in_one_line_within_the_budget(clock, capsys, monkeypatch,
                                                                               token_credentials, kind, fault):
    product, service, doing, tail, repeats_lost_answers = KINDS[kind]
    for key in POLICY_ENV:
        monkeypatch.delenv(key, raising=False)
    p = short_policy(monkeypatch) if fault == "hang" else policy()
    url, standin = server(fault)
    try:
        rc = run_command(lambda argv: product(url) or 0, [])
        ended = clock.now()
    finally:
        if standin:
            standin.stop()
    line = error_line(capsys, rc)
    retried = fault == "refused" or repeats_lost_answers
    lines = check_lines(clock, p, service, doing, WHAT[fault])
    if retried:
        assert lines, "a retried call must say so"
        first = lines[0][0]
        assert first <= (p.read_s if fault == "hang" else 0.0) + SLACK, first  # at once, or at the read timeout
        if fault == "hang":
            assert first >= p.read_s  # the line came when the failure was seen, not before
        assert re.fullmatch(rf"error: {doing}: gave up after retrying for {seconds(p.total_s)} s: "
                            rf"{WHAT[fault]}; {tail}", line), line
    else:  # a model upload whose answer may be lost: never repeated, one line at once
        assert lines == []
        assert re.fullmatch(rf"error: {doing}: {WHAT[fault]}; {tail}", line), line
    # the budget holds: no sleep ends past it (exact: the sleeps are fake), so the last attempt starts within it, and
    # only that attempt, its timeout capped, and its real handling (SLACK, the machine's load: seen 0.45 s) follow
    assert all(at + delay <= p.total_s for at, delay in clock.sleeps_at()), clock.events
    assert ended <= p.total_s + (SLACK if fault == "hang" else 0.0), ended
    if standin and fault == "503" and kind != "http":
        sent = [{k.lower(): v for k, v in r.headers.items()}.get("authorization", "") for r in standin.requests]
        assert sent and all(TOKEN in h for h in sent)  # the token was on the wire, and still in no line
    if standin and kind == "http":
        assert standin.requests and all("authorization" in {k.lower() for k in r.headers} for r in standin.requests)


# ---- a 409 on the create, then a 404 on the read-back ---------------------------------------------------------

def test_a_409_then_a_404_on_the_read_back_says_both(clock, capsys, default_policy):
    with VertexStandIn() as vertex:
        vertex.fault(409, r"/pipelineJobs$", method="POST", message="PipelineJob flowers-20261124-abcd already exists")
        vertex.fault(404, r"/pipelineJobs/", method="GET", message="PipelineJob flowers-20261124-abcd not found")
        rc = run_command(lambda argv: create_pipeline_job(vertex.url) or 0, [])
        posts, gets = vertex.calls("POST", r"/pipelineJobs$"), vertex.calls("GET", r"/pipelineJobs/")
    line = error_line(capsys, rc)
    assert re.fullmatch(rf"error: creating pipeline job {NAME}: the create answered 409 ALREADY_EXISTS "
                        r"\(PipelineJob flowers-20261124-abcd already exists\), but reading it back answered 404 "
                        rf"NOT_FOUND \(PipelineJob flowers-20261124-abcd not found\); it may exist even so, look for "
                        rf"it: {HINT}", line), line
    assert (len(posts), len(gets)) == (1, 1) and clock.lines() == []


def test_a_409_then_a_read_back_that_gives_up_says_both(clock, capsys, monkeypatch):
    short_policy(monkeypatch)
    with VertexStandIn() as vertex:
        vertex.fault(409, r"/pipelineJobs$", method="POST")
        vertex.fault(503, r"/pipelineJobs/", method="GET", times=None)
        rc = run_command(lambda argv: create_pipeline_job(vertex.url) or 0, [])
    line = error_line(capsys, rc)
    assert re.fullmatch(rf"error: creating pipeline job {NAME}: the create answered 409 ALREADY_EXISTS "
                        rf"\(stand-in fault 409\), then reading pipeline job {NAME}: gave up after retrying for "
                        rf"0\.7 s: 503 stand-in fault 503; it may exist: {HINT}", line), line
    assert clock.lines() and all(f"reading pipeline job {NAME}: 503" in t for _, t in clock.lines())


def test_a_cloud_build_create_refused_is_retried_with_lines(clock, capsys, default_policy):
    """The other server-id create (Cloud Build): refused is safe to repeat, and each repeat is said."""
    from google.cloud.devtools import cloudbuild_v1

    from jobs.cloud.apis import cloudbuild

    url = f"http://127.0.0.1:{closed_port()}"
    rc = run_command(lambda argv: cloudbuild.run_build(cloudbuild_v1.Build(), project=PROJECT, endpoint=url,
                                                               log=lambda line: None) or 0, [])
    line = error_line(capsys, rc)
    check_lines(clock, default_policy, "Cloud Build", f"creating a Cloud Build build in project {PROJECT}",
                WHAT["refused"])
    assert clock.lines() and clock.lines()[0][0] < 0.5 and clock.now() <= default_policy.total_s
    assert re.fullmatch(rf"error: creating a Cloud Build build in project my-proj: gave up after retrying for 120 s: "
                        rf"{WHAT['refused']}; a build may have been created even so: gcloud builds list --ongoing "
                        r"--project my-proj", line), line
