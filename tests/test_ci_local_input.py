"""``vtp ci-local``'s input, refused before anything starts (issue 44: accepted and wrong, and unclear): one
``error:`` line naming the flag or the build file's field, exit 2, no traceback, no run folder made.

Rules (owners): duplicate step ids and negative timeouts (``jobs.commands.ci_local.build_file.step_rules``); Cloud Build's
substitution limits and gcloud's comma form (``jobs.commands.ci_local.substitutions``); ``--project``, ``--timeout``
(``jobs.commands.ci_local.cli.flag_problems`` over ``jobs.rules.preflight.project_problems`` and
``jobs.rules.command_line.seconds_problem``); ``--registry``'s form (``jobs.commands.ci_local.standins.registry_problem``)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from tests.test_cloudbuild_local import ci_local, toy_build


def _refused(capsys, tmp_path, fragment, *args, steps=None, **extra):
    tmp_path.mkdir(parents=True, exist_ok=True)
    config = toy_build(tmp_path, steps or [{"id": "x", "script": "true"}], **extra)
    status, out, err = ci_local(capsys, config, tmp_path, *args)
    assert status == 2 and len(err) == 1 and err[0].startswith("error: ") and fragment in err[0], (out, err)
    assert "Traceback" not in "\n".join(out + err)
    assert not (tmp_path / "run").exists()  # refused before anything was made
    return err[0]


@pytest.mark.parametrize("steps, extra, fragment", [
    ([{"id": "a", "script": "true"}, {"id": "a", "script": "true"}], {},
     "step #1: id 'a' is already step #0's; every step id is unique"),
    ([{"id": "a", "script": "true"}, {"id": "b", "script": "true"}, {"id": "b", "script": "true", "waitFor": ["a"]}],
     {}, "step #2: id 'b' is already step #1's"),
    ([{"id": "a", "script": "true"}], {"timeout": "-5s"}, "timeout -5s is negative; give a positive duration"),
    ([{"id": "a", "script": "true"}], {"timeout": "-0.5s"}, "timeout -0.500s is negative"),
    ([{"id": "a", "script": "true", "timeout": "-1s"}], {}, "step a: timeout -1s is negative"),
])
def test_a_build_file_no_build_can_mean_is_one_line(capsys, tmp_path, steps, extra, fragment):
    _refused(capsys, tmp_path, fragment, steps=steps, **extra)


@pytest.mark.process
def test_steps_without_ids_are_not_duplicates(capsys, tmp_path):
    config = toy_build(tmp_path, [{"script": "true"}, {"script": "true"}])
    status, out, err = ci_local(capsys, config, tmp_path)
    assert status == 0, (out, err)


@pytest.mark.parametrize("args, fragment", [
    (["--project", ""], "--project: '' is not a project id"),
    (["--project", "My Project"], "--project: 'My Project' is not a project id"),
    (["--project", "p"], "--project: 'p' is not a project id"),
    (["--registry", "http://127.0.0.1:5000"], "--registry 'http://127.0.0.1:5000': not a registry's HOST:PORT"),
    (["--registry", "127.0.0.1"], "--registry '127.0.0.1': not a registry's HOST:PORT"),
    (["--registry", "127.0.0.1:99999"], "not a registry's HOST:PORT (no scheme, no path; the port 1-65535)"),
    (["--registry", "localhost:5000/v2"], "not a registry's HOST:PORT"),
    (["--timeout", "nan"], "--timeout nan: give a finite number of seconds"),
    (["--timeout", "inf"], "--timeout inf: give a finite number of seconds"),
    (["--timeout", "1e12"], "at most 86,400"),
    (["--substitution", "_L=a,b"], "gcloud reads ',' as between two substitutions, and 'b' is no KEY=VALUE"),
    (["--substitutions", "_A=1,lower=2"], "a user substitution is _ then capitals"),
])
def test_a_bad_flag_is_one_line_before_anything(capsys, tmp_path, args, fragment):
    _refused(capsys, tmp_path, fragment, *args, substitutions={"_A": "a", "_B": "b", "_L": "l"},
             options={"substitutionOption": "ALLOW_LOOSE"})


def test_a_malformed_registry_is_refused_by_its_form_not_by_the_engine(capsys, tmp_path):
    """The docker steps would ask an engine: the registry's form is refused first, whatever the engine."""
    line = _refused(capsys, tmp_path, "not a registry's HOST:PORT", "--registry", "127.0.0.1:port",
                    "--docker-host", "unix:///nonexistent/docker.sock", steps=[{"id": "x", "name": "docker", "script": "true"}])
    assert "Docker engine" not in line


@pytest.mark.process
def test_the_comma_form_is_read_as_gcloud_reads_it(capsys, tmp_path):
    steps = [{"id": "x", "script": "echo \"A=$_A B=$_B L=$_L\""}]
    config = toy_build(tmp_path, steps, substitutions={"_A": "a", "_B": "b", "_L": "l"},
                       options={"automapSubstitutions": True})
    status, out, err = ci_local(capsys, config, tmp_path, "--substitution", "_A=1,_B=2", "--verbose")
    assert status == 0, (out, err)
    assert any("A=1 B=2 L=l" in line for line in out), out
    status, out, err = ci_local(capsys, config, tmp_path, "--substitutions", "^;^_L=x,y;_A=3", "--verbose")
    assert status == 0, (out, err)
    assert any("A=3 B=b L=x,y" in line for line in out), out


@pytest.mark.parametrize("name, value, fragment", [
    ("_" + "K" * 100, "v", "its name has 101 characters; Cloud Build takes at most 100"),
    ("_BIG", "x" * 4001, "substitution _BIG: its value has 4,001 bytes; Cloud Build takes at most 4,000"),
    ("_UTF", "é" * 2001, "its value has 4,002 bytes"),
])
def test_substitutions_past_cloud_builds_limits(capsys, tmp_path, name, value, fragment):
    # in the file
    _refused(capsys, tmp_path, fragment, substitutions={name: value})
    # or on the command line
    _refused(capsys, tmp_path / "flag", fragment, "--substitution", f"{name}={value}",
             options={"substitutionOption": "ALLOW_LOOSE"})


@pytest.mark.process
def test_just_inside_the_limits_runs(capsys, tmp_path):
    subs = {f"_S{i}": "x" for i in range(199)} | {"_" + "K" * 99: "v" * 4000}
    config = toy_build(tmp_path, [{"id": "x", "script": "true"}], substitutions=subs)
    status, out, err = ci_local(capsys, config, tmp_path)
    assert status == 0, (out, err)
    _refused(capsys, tmp_path / "more", "201 user-defined substitutions: Cloud Build takes at most 200",
             substitutions={**subs, "_ONE": "1"})


@settings(max_examples=40, deadline=None)
@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True).filter(lambda x: not 0 < x <= 86400),
                 st.floats(min_value=86400.001, max_value=1e300)))
def test_every_build_timeout_outside_its_range_is_one_line(value):
    import argparse

    from jobs.commands.ci_local.cli import flag_problems

    problems = flag_problems(argparse.Namespace(project="local-project", timeout=value, substitution=[]))
    assert len(problems) == 1 and problems[0].startswith("--timeout ") and "finite number of seconds" in problems[0]


@pytest.mark.process
def test_the_timeout_flag_says_it_wins_over_the_files(capsys, tmp_path):
    config = toy_build(tmp_path, [{"id": "x", "script": "true"}], timeout="600s")
    status, out, err = ci_local(capsys, config, tmp_path, "--timeout", "120")
    assert status == 0 and "warning: --timeout 120 s wins over cloudbuild.yaml's timeout (600 s)" in out, (out, err)
    status, out, err = ci_local(capsys, config, tmp_path, "--timeout", "600")
    assert status == 0 and not any(line.startswith("warning: --timeout") for line in out)
