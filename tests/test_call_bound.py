"""The bound of a call and of a command, by construction (``jobs.cloud.apis.clients.retried`` and ``within``), on a fake
clock: no attempt runs past the deadline, none starts with less than ``MIN_ATTEMPT_S`` left (even when a sleep
overran, as on a busy machine), and inside ``within`` every call ends by the command's deadline, counted from when
the command started (its start-up and compiling included: a submit against an endpoint that never answers ended
121-123 s after it was started, against the README's 120 s, because the create's own 120 s began only after
~5 s of start-up and compiling)."""
from __future__ import annotations

import pytest
import requests
from google.api_core import exceptions as core
from hypothesis import HealthCheck, given, settings, strategies as st

from jobs.cloud.apis import clients
from jobs.cloud.apis.policy import CREATE_OWN_ID, MIN_ATTEMPT_S, POLICY_ENV, READ, policy
from jobs.cloud.apis.lines import failure_line


class FakeClock:
    """``clients``' monotonic clock and sleep: attempts advance it by what they wait; a sleep may overrun."""

    def __init__(self, overrun_s: float = 0.0):
        self.t, self.overrun_s, self.attempts, self.lines = 1000.0, overrun_s, [], []

    def monotonic(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds + self.overrun_s

    def silent(self, timeout):
        """An endpoint that accepts the connection and never answers: the attempt lasts its read timeout."""
        self.attempts.append((self.t, timeout))
        self.t += timeout[1]
        raise requests.exceptions.ReadTimeout("read timed out")


def install(monkeypatch, clock: FakeClock, **policy: str) -> None:
    for name in ("monotonic", "sleep"):
        monkeypatch.setattr(clients, name, getattr(clock, name))
    monkeypatch.setattr(clients, "wall_time", lambda: 1.7e9 + clock.t)
    monkeypatch.setattr(clients, "say", clock.lines.append)
    for key in POLICY_ENV:
        monkeypatch.delenv(key, raising=False)
    for key, value in policy.items():
        monkeypatch.setenv(key, value)


def check_attempts(clock: FakeClock, deadline: float) -> None:
    for started, timeout in clock.attempts:
        assert started + max(timeout) <= deadline + 1e-9, (started, timeout, deadline)
        if (started, timeout) != clock.attempts[0]:
            assert max(timeout) >= min(MIN_ATTEMPT_S, max(policy().timeout)) - 1e-9


def test_a_create_inside_a_command_ends_by_the_commands_deadline_not_its_own(monkeypatch):
    """The case of the issue: 6 s of start-up and compiling, then a create that never answers, default policy."""
    clock = FakeClock()
    install(monkeypatch, clock)
    started = clock.t - 6.0  # the command started 6 s before its create
    with clients.within(since=started), pytest.raises(core.RetryError) as gave_up:
        clients.retried(clock.silent, kind=CREATE_OWN_ID, doing="creating pipeline job J", service="Vertex AI")
    assert clock.t - started <= 120.0 - clients.EXIT_RESERVE_S, clock.t - started  # its last second: the exit's
    check_attempts(clock, started + 120.0 - clients.EXIT_RESERVE_S)
    assert len(clock.attempts) > 1 and len(clock.lines) == len(clock.attempts) - 1
    assert failure_line(gave_up.value, "creating pipeline job J", "").startswith(
        "creating pipeline job J: gave up after retrying for 113 s: no answer from the server within 10 s")
    # without the command's bound the same create would have had its own whole 120 s
    alone = FakeClock()
    install(monkeypatch, alone)
    with pytest.raises(core.RetryError):
        clients.retried(alone.silent, kind=CREATE_OWN_ID, doing="creating pipeline job J")
    assert "(110 s left)" in alone.lines[0] and "(103 s left)" in clock.lines[0], (alone.lines[0], clock.lines[0])


def test_a_sleep_that_overran_starts_no_attempt_it_cannot_finish(monkeypatch):
    """Each sleep lasts 3 s longer than asked (a loaded machine): the last attempt is not made rather than run
    past the budget, and the budget holds."""
    clock = FakeClock(overrun_s=3.0)
    install(monkeypatch, clock, VTP_CLOUD_RETRY_TOTAL_S="25", VTP_CLOUD_RETRY_FIRST_S="1")
    with pytest.raises(core.RetryError):
        clients.retried(clock.silent, doing="reading R")
    assert clock.t - 1000.0 <= 25.0 + 3.0 + 1e-9  # only a sleep can overrun, and no attempt follows it
    check_attempts(clock, 1025.0)


def test_the_first_attempt_is_whole_even_when_the_command_used_its_bound(monkeypatch):
    """A command whose local work alone took its whole bound still tries once, with a whole attempt."""
    clock = FakeClock()
    install(monkeypatch, clock)
    with clients.within(since=clock.t - 200.0), pytest.raises(core.RetryError):
        clients.retried(clock.silent, doing="reading R")
    assert clock.attempts == [(1000.0, (10.0, 10.0))]


def test_nested_bounds_the_earlier_wins(monkeypatch):
    clock = FakeClock()
    install(monkeypatch, clock)
    with clients.within(30.0, since=clock.t), clients.within(since=clock.t):
        with pytest.raises(core.RetryError):
            clients.retried(clock.silent, doing="reading R")
    assert clock.t - 1000.0 <= 30.0 - clients.EXIT_RESERVE_S
    check_attempts(clock, 1030.0 - clients.EXIT_RESERVE_S)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(before_s=st.floats(0, 100), overrun_s=st.floats(0, 2), total_s=st.floats(1, 300), read_s=st.floats(0.1, 30),
       first_s=st.floats(0.01, 5), max_s=st.floats(0.05, 60), kind=st.sampled_from([READ, CREATE_OWN_ID]))
def test_every_call_in_a_command_ends_by_its_deadline(monkeypatch, before_s, overrun_s, total_s, read_s, first_s, max_s,
                                                     kind):
    """Any policy, any start-up before the call, any sleep overrun: the call ends by the command's deadline (plus
    at most the last sleep's overrun), or after its one whole first attempt when the start-up used the bound."""
    clock = FakeClock(overrun_s=overrun_s)
    install(monkeypatch, clock, VTP_CLOUD_RETRY_TOTAL_S=repr(total_s), VTP_CLOUD_COMMAND_S=repr(total_s),
            VTP_CLOUD_READ_TIMEOUT_S=repr(read_s),
            VTP_CLOUD_CONNECT_TIMEOUT_S=repr(read_s), VTP_CLOUD_RETRY_FIRST_S=repr(first_s),
            VTP_CLOUD_RETRY_MAX_S=repr(max_s))
    started = clock.t - before_s
    with clients.within(since=started), pytest.raises(core.RetryError):
        clients.retried(clock.silent, kind=kind, doing="creating J")
    deadline = max(started + total_s - clients.EXIT_RESERVE_S, 1000.0 + read_s)
    assert clock.t <= deadline + overrun_s + 1e-6, (clock.t, deadline)
    check_attempts(clock, deadline)
