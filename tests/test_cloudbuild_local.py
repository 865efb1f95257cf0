"""`vtp ci-local` (jobs/commands/ci_local/): cloudbuild.yaml run here, step by step, as Cloud Build runs it.

The fast tests run small build files of their own (bash one-liners) to check what the runner does as Cloud
Build does: the order waitFor gives (concurrent where allowed), a failed step stopping the build, timeouts
stopping a step's whole process group, substitutions (file < trigger < command line; dynamic ones resolved
against the built-ins), the environment a step gets (no credentials, this interpreter as `python`), and the
refusals of anything that would reach the cloud.

The integration test runs the project's own cloudbuild.yaml, every step, end to end: a fresh commit made of
this checkout's tracked files (a .venv, build outputs and caches lying beside them), the install step over
this interpreter's packages (``--install reuse``), the unit-tests step on a bounded selection (``--tests``:
this file is marked integration, which that step never selects), the docker steps on a real engine and
registry with the small FROM-scratch image (``--small-images``), templates to the KFP registry stand-in and
the submission to the Vertex AI stand-in; then everything is read back from those servers.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, assert_no_processes_left

PROJECT = "local-project"


def toy_build(tmp_path: Path, steps: list[dict], **extra) -> Path:
    """A build file of bash steps in a folder of its own (not a git checkout: ``--as submit``)."""
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / "hello.txt").write_text("source\n")
    doc = {"steps": [{"name": s.get("name", "ubuntu"), **{k: v for k, v in s.items() if k != "name"},
                      "script": "#!/usr/bin/env bash\nset -euo pipefail\n" + textwrap.dedent(s["script"])}
                     for s in steps], **extra}
    (src / "cloudbuild.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return src / "cloudbuild.yaml"


def ci_local(capsys, config: Path, tmp_path: Path, *args: str) -> tuple[int, list[str], list[str]]:
    from jobs.commands.ci_local import main

    status = main(["--config", str(config), "--as", "submit", "--workspace", str(tmp_path / "run"), *args])
    out, err = capsys.readouterr()
    return status, out.splitlines(), err.splitlines()


def step_lines(out: list[str]) -> dict[str, list[str]]:
    """The final table: step id -> [status words..., seconds]."""
    table = out[out.index("steps:") + 1:]
    return {line.split()[0]: line.split()[1:] for line in table if line.startswith("  ") and len(line.split()) > 1}


@pytest.mark.process
def test_steps_run_by_their_waits_concurrently_where_cloud_build_would(capsys, tmp_path):
    # b starts at once (waitFor '-') beside a, which waits for the file b writes: run one after the other,
    # a would time out; c has no waitFor, so it waits for both; d waits for a only.
    config = toy_build(tmp_path, [
        {"id": "a", "script": "for i in $(seq 100); do [ -f b.done ] && break; sleep 0.1; done; test -f b.done; "
                              "echo a >> order"},
        {"id": "b", "waitFor": ["-"], "script": "echo b >> order; touch b.done"},
        {"id": "c", "script": "echo c >> order; test -f hello.txt"},
        {"id": "d", "waitFor": ["a"], "script": "echo d >> order"},
    ])
    status, out, err = ci_local(capsys, config, tmp_path, "--timeout", "60")
    assert status == 0, out + err
    assert any(re.fullmatch(r"  order\s+by waitFor, concurrent where allowed", line) for line in out), out
    order = (tmp_path / "run" / "workspace" / "order").read_text().split()
    assert order[:2] == ["b", "a"] and set(order[2:]) == {"c", "d"}
    assert {k: v[0] for k, v in step_lines(out).items()} == {"a": "SUCCESS", "b": "SUCCESS", "c": "SUCCESS",
                                                             "d": "SUCCESS"}
    assert any(line.startswith("build SUCCESS in ") for line in out)


@pytest.mark.process
def test_a_failed_step_stops_the_build_and_what_runs_beside_it(capsys, tmp_path):
    marker = uuid.uuid4().hex
    config = toy_build(tmp_path, [
        {"id": "ok", "script": "true"},
        {"id": "tolerated", "waitFor": ["-"], "allowFailure": True, "script": "exit 1"},
        {"id": "allowed", "waitFor": ["-"], "allowExitCodes": [4], "script": "exit 4"},
        {"id": "slow", "waitFor": ["ok"], "script": f"MARK={marker} sleep 60"},
        # a failure allowed does not stop what waits for it
        {"id": "broken", "waitFor": ["ok", "tolerated", "allowed"], "script": "echo 'what went wrong' >&2; exit 3"},
        {"id": "after", "script": "touch never"},
    ])
    started = time.monotonic()
    status, out, err = ci_local(capsys, config, tmp_path, "--timeout", "120")
    assert status == 1 and time.monotonic() - started < 30, out
    table = step_lines(out)
    assert table["ok"][0] == "SUCCESS" and table["broken"][:3] == ["FAILURE", "(exit", "3)"]
    assert table["slow"][0] == "CANCELLED" and table["after"][:2] == ["NOT", "RUN"]
    assert table["tolerated"][:4] == ["FAILURE", "(exit", "1,", "allowed)"]
    assert table["allowed"][:4] == ["FAILURE", "(exit", "4,", "allowed)"]
    assert "    | what went wrong" in out  # the failed step's last lines
    assert not (tmp_path / "run" / "workspace" / "never").exists()
    assert any(line.startswith("build FAILURE in ") for line in out)
    assert_no_processes_left(marker)


@pytest.mark.process
def test_a_step_past_its_timeout_is_stopped_with_everything_it_started(capsys, tmp_path):
    marker = uuid.uuid4().hex
    config = toy_build(tmp_path, [
        {"id": "hangs", "timeout": "2s", "script": f"(MARK={marker} sleep 300 &) ; MARK={marker} sleep 300"},
        {"id": "leaves-one-behind", "waitFor": ["-"], "script": f"(MARK={marker} sleep 300 &); true"},
        # a session of its own, as a test's dockerd has: out of the step's process group, never of its environment
        {"id": "leaves-a-daemon", "waitFor": ["-"], "script": f"MARK={marker} setsid sleep 300 < /dev/null > /dev/null 2>&1 &"},
    ])
    started = time.monotonic()
    status, out, _ = ci_local(capsys, config, tmp_path)
    assert status == 1 and time.monotonic() - started < 30
    assert step_lines(out)["hangs"][0] == "TIMEOUT"
    assert step_lines(out)["leaves-one-behind"][0] == "SUCCESS" and step_lines(out)["leaves-a-daemon"][0] == "SUCCESS"
    assert "ci-local: stopped 1 process(es) the step left running" in (
        tmp_path / "run" / "logs" / "02-leaves-a-daemon.log").read_text()
    assert_no_processes_left(marker)  # a step's process group ends with it, as a step's container does


def test_ctrl_c_stops_every_step_and_says_so(tmp_path):
    marker = uuid.uuid4().hex
    config = toy_build(tmp_path, [{"id": "first", "script": "true"},
                                  {"id": "long", "script": f"echo started; MARK={marker} sleep 300"},
                                  {"id": "never", "script": "true"}])
    proc = subprocess.Popen([sys.executable, "-m", "jobs.commands.ci_local", "--config", str(config), "--as", "submit",
                             "--workspace", str(tmp_path / "run")], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        log = tmp_path / "run" / "logs" / "01-long.log"
        while not (log.is_file() and "started" in log.read_text()) and time.monotonic() < deadline:
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130 and err.strip() == "interrupted (Ctrl-C): every step stopped", err
    table = step_lines(out.splitlines())
    assert table["first"][0] == "SUCCESS" and table["long"][0] == "CANCELLED" and table["never"][:2] == ["NOT", "RUN"]
    assert_no_processes_left(marker)


@pytest.mark.process
def test_the_build_timeout_stops_the_running_steps(capsys, tmp_path):
    config = toy_build(tmp_path, [{"id": "long", "script": "sleep 300"}, {"id": "next", "script": "true"}])
    started = time.monotonic()
    status, out, _ = ci_local(capsys, config, tmp_path, "--timeout", "2")
    assert status == 1 and time.monotonic() - started < 30
    assert step_lines(out)["long"][0] in ("TIMEOUT", "CANCELLED") and step_lines(out)["next"][:2] == ["NOT", "RUN"]


@pytest.mark.process
def test_substitutions_and_the_environment_a_step_gets(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "key.json"))
    monkeypatch.setenv("PYTHONPATH", "/somewhere/else")
    config = toy_build(tmp_path, [
        {"id": "show", "name": "python:3.11-slim", "env": ["FROM_STEP=${_B}-x"],
         "script": 'echo "A=$_A B=$_B C=$_C D=$FROM_STEP P=$PROJECT_ID S=${SHORT_SHA:-empty}" > env.txt\n'
                   'echo "creds=${GOOGLE_APPLICATION_CREDENTIALS:-none} pp=${PYTHONPATH:-none} gce=$NO_GCE_CHECK" >> env.txt\n'
                   'python -c "import sys; print(sys.executable)" >> env.txt\n'},
    ], substitutions={"_A": "a-${PROJECT_ID}", "_B": "b", "_C": "${_A}/c"},
        options={"automapSubstitutions": True, "dynamicSubstitutions": True})
    status, out, err = ci_local(capsys, config, tmp_path, "--project", "my-proj-9", "--substitution", "_B=given")
    assert status == 0, out + err
    lines = (tmp_path / "run" / "workspace" / "env.txt").read_text().splitlines()
    assert lines[0] == "A=a-my-proj-9 B=given C=a-my-proj-9/c D=given-x P=my-proj-9 S=empty"
    assert lines[1] == "creds=none pp=none gce=true"
    assert os.path.realpath(lines[2]) == os.path.realpath(sys.executable)  # python:* steps: this interpreter


@pytest.mark.parametrize("substitutions, options, args, fragment", [
    ({"_A": "x"}, {"substitutionOption": "MUST_MATCH"}, ["--substitution", "_NOPE=1"],
     "--substitution _NOPE: not a substitution of cloudbuild.yaml and substitutionOption is MUST_MATCH; valid choices: _A"),
    ({"_A": "${_B}", "_B": "${_A}"}, {"dynamicSubstitutions": True}, [],
     "substitutions refer to each other in a circle: _A -> _B -> _A"),
    ({"_A": "${PROJECT_ID:0:3}"}, {"dynamicSubstitutions": True}, [],
     "substitution _A: ${PROJECT_ID:0:3} uses a bash-style operation, which ci-local does not apply"),
    ({}, {}, ["--substitution", "lower=1"], "--substitution lower=...: a user substitution is _ then capitals"),
    ({}, {}, ["--registry", "us-docker.pkg.dev:443"], "--registry us-docker.pkg.dev:443: not a loopback address"),
])
def test_bad_substitutions_are_one_error_line(capsys, tmp_path, substitutions, options, args, fragment):
    config = toy_build(tmp_path, [{"id": "x", "script": "true"}], substitutions=substitutions, options=options)
    status, out, err = ci_local(capsys, config, tmp_path, *args)
    assert status == 2 and len(err) == 1 and err[0].startswith("error: ") and fragment in err[0], err
    assert not (tmp_path / "run").exists()  # refused before anything was made


@pytest.mark.parametrize("where", ["step", "options"])
def test_an_env_value_that_cannot_be_expanded_is_one_error_line_before_any_step(capsys, tmp_path, where):
    """``A=${PROJECT_ID:0:3}`` in a step's (or the build's) env: refused before the workspace is made, never a
    traceback in the step's thread after other steps ran."""
    env = ["A=${PROJECT_ID:0:3}"]
    steps = [{"id": "first", "script": "true"}, {"id": "x", "script": "echo $A", **({"env": env} if where == "step" else {})}]
    config = toy_build(tmp_path, steps, **({"options": {"env": env}} if where == "options" else {}))
    status, out, err = ci_local(capsys, config, tmp_path)
    assert status == 2 and len(err) == 1, (out, err)
    assert err[0].startswith("error: ") and "${PROJECT_ID:0:3} uses a bash-style operation" in err[0], err
    assert not (tmp_path / "run").exists()


def test_a_build_file_that_cannot_run_here_is_one_error_line(capsys, tmp_path):
    config = toy_build(tmp_path, [{"id": "x", "script": "true"}])
    doc = yaml.safe_load(config.read_text())
    doc["steps"].append({"id": "y", "name": "gcr.io/cloud-builders/gcloud", "args": ["builds", "list"]})
    config.write_text(yaml.safe_dump(doc))
    status, _, err = ci_local(capsys, config, tmp_path)
    assert status == 2 and err == ["error: " + f"{config}: step y: only `script` steps run here (this one gives "
                                              "args/entrypoint to gcr.io/cloud-builders/gcloud); write it as a script"]
    config.write_text(yaml.safe_dump({"steps": [{"id": "x", "name": "ubuntu", "script": "true"}], "stepz": []}))
    status, _, err = ci_local(capsys, config, tmp_path)
    assert status == 2 and len(err) == 1 and "is not a Cloud Build config" in err[0] and "stepz" in err[0]



@pytest.mark.parametrize("text, fragment", [
    ("", "is empty, not a Cloud Build config"),
    ("# only a comment\n", "is empty, not a Cloud Build config"),
    ("- steps\n", "is a YAML list, not a Cloud Build config"),
    ("just words\n", "is a YAML str, not a Cloud Build config"),
    ("42\n", "is a YAML int, not a Cloud Build config"),
    ("steps: 5\n", "is not a Cloud Build config"),
    ("steps:\n- name: ubuntu\n  script: 'true'\n- id: b\n  name: ubuntu\n  script: 'true'\n  waitFor: ['']\n",
     "step b: waitFor has an empty id; name the id of an earlier step, or '-' to start at once"),
    ("steps:\n- id: a\n  name: ubuntu\n  script: 'true'\n  waitFor: ['-', '']\n",
     "step a: waitFor has an empty id"),
])
def test_a_build_file_with_nothing_to_run_or_an_empty_wait_is_one_error_line(capsys, tmp_path, text, fragment):
    """An empty (or non-mapping) build file and a ``waitFor`` naming an empty id (which an id-less step would have
    matched, and the runner then failed on): one ``error:`` line naming the file, exit 2, nothing started."""
    config = tmp_path / "cloudbuild.yaml"
    config.write_text(text)
    status, out, err = ci_local(capsys, config, tmp_path)
    assert status == 2 and len(err) == 1 and err[0].startswith("error: ") and fragment in err[0], (out, err)
    assert "Traceback" not in "\n".join(out + err)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("where", ["file", "under-a-file", "under-a-file-deeper"])
def test_a_workspace_that_cannot_be_a_folder_is_one_error_line(capsys, tmp_path, where):
    """``--workspace`` a file, or below one: refused with the other flags, before any step; the file untouched."""
    from jobs.commands.ci_local import main

    config = toy_build(tmp_path, [{"id": "x", "script": "touch ran"}])
    afile = tmp_path / "afile"
    afile.write_bytes(b"mine\n")
    workspace = {"file": afile, "under-a-file": afile / "run", "under-a-file-deeper": afile / "a" / "b"}[where]
    status = main(["--config", str(config), "--as", "submit", "--workspace", str(workspace)])
    out, err = capsys.readouterr()
    err = err.splitlines()
    assert status == 2 and len(err) == 1 and err[0].startswith(f"error: --workspace {workspace}: "), (out, err)
    assert "a file, not a folder; give an empty or new folder" in err[0]
    assert afile.read_bytes() == b"mine\n" and "Traceback" not in out


@pytest.mark.parametrize("args, fragment", [
    ([], "the docker steps would push to Artifact Registry (us-central1-docker.pkg.dev): give --registry 127.0.0.1:PORT"),
    (["--registry", "127.0.0.1:5000"], "upload-templates would upload to https://us-central1-kfp.pkg.dev/local-project/"
                                       "pipelines: give --kfp-host http://127.0.0.1:PORT/PROJECT/REPO"),
    (["--registry", "127.0.0.1:5000", "--kfp-host", "https://us-central1-kfp.pkg.dev/p/pipelines"],
     "--kfp-host https://us-central1-kfp.pkg.dev/p/pipelines: not a loopback address; a local run contacts no cloud"),
    (["--registry", "127.0.0.1:5000", "--substitution", "_TEMPLATE_REPOSITORY=", "--substitution", "_SUBMIT=true"],
     "submit would send multiworker to Vertex AI (us-central1-aiplatform.googleapis.com): give --vertex-endpoint"),
    (["--registry", "127.0.0.1:5000", "--substitution", "_TEMPLATE_REPOSITORY=", "--docker-host",
      "unix:///nonexistent/docker.sock"], "no Docker engine reachable at unix:///nonexistent/docker.sock"),
])
def test_the_project_build_never_reaches_the_cloud(capsys, tmp_path, args, fragment):
    """Refused before anything runs, one line naming what the local run needs instead."""
    from jobs.commands.ci_local import main

    if "--docker-host" in args and not shutil.which("docker"):
        pytest.skip("needs the docker CLI (apt-get install docker.io)")
    # --as submit: no git needed (Cloud Build's unit-tests step has neither .git nor git)
    status = main(["--config", str(ROOT / "cloudbuild.yaml"), "--as", "submit", "--workspace", str(tmp_path / "run"),
                   *args])
    _, err = capsys.readouterr()
    err = err.splitlines()
    assert status == 2 and len(err) == 1 and err[0].startswith("error: ") and fragment in err[0], err
    assert not (tmp_path / "run").exists()


@pytest.mark.process
def test_a_folder_that_is_not_an_earlier_run_is_never_wiped(capsys, tmp_path):
    config = toy_build(tmp_path, [{"id": "x", "script": "true"}])
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "mine.txt").write_text("keep me\n")
    status, _, err = ci_local(capsys, config, tmp_path)
    assert status == 2 and "not empty and not an earlier ci-local run" in err[0]
    assert (tmp_path / "run" / "mine.txt").read_text() == "keep me\n"
    (tmp_path / "run" / "mine.txt").unlink()
    assert ci_local(capsys, config, tmp_path)[0] == 0
    assert ci_local(capsys, config, tmp_path)[0] == 0  # an earlier run's folder: replaced


# ---- the project's cloudbuild.yaml, every step, end to end ------------------------------------------------

def fresh_checkout(tmp_path: Path) -> Path:
    """This checkout's tracked files committed in a new repository, with a virtualenv (this interpreter's
    symlink and a file of some size), build outputs and caches lying in it, as in a user's checkout."""
    from jobs.ci.cloudbuild_steps import copy_source

    src = tmp_path / "checkout"
    copy_source(ROOT, src)
    git = ["git", "-c", "user.name=ci-local", "-c", "user.email=ci@example.com", "-c", "init.defaultBranch=main"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "the pushed commit"]):
        subprocess.run([*git, *args], cwd=src, check=True, capture_output=True)
    (src / ".venv" / "bin").mkdir(parents=True)
    (src / ".venv" / "bin" / "python").symlink_to(sys.executable)
    (src / ".venv" / "lib").mkdir()
    (src / ".venv" / "lib" / "libbig.so").write_bytes(b"\0" * (8 << 20))
    for rel in ("build/ci/images.txt", "jobs/__pycache__/ci.cpython-311.pyc", ".pytest_cache/v/x", "runs/local/x"):
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text("lying around\n")
    return src


@pytest.mark.integration
@pytest.mark.docker
@pytest.mark.timeout(900)
def test_the_trigger_runs_every_step_here_end_to_end(own_dockerd, own_registry, tmp_path):
    """``vtp ci-local`` as the trigger runs cloudbuild.yaml, every step for real, on an engine and a registry of this
    module's own (the build needs no trainer image: this runs on any worker, beside the trainer image's tests)."""
    from tests.docker_servers import BUSYBOX, require
    from tests.standins.kfp_registry import KfpRegistryStandIn
    from tests.standins.vertex import VertexStandIn
    from jobfile import config as config_lib

    require(BUSYBOX)
    src = fresh_checkout(tmp_path)
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=src, capture_output=True, text=True).stdout.strip()
    marker = uuid.uuid4().hex
    rundir = tmp_path / "run"
    with KfpRegistryStandIn(project=PROJECT, repo="pipelines") as kfp, VertexStandIn() as vertex:
        cmd = [sys.executable, "pipelines/run.py", "ci-local", "--workspace", str(rundir), "--install", "reuse",
               "--small-images", "--tests", "tests/test_cloudbuild.py", "--registry", own_registry.host,
               "--docker-host", own_dockerd.host, "--kfp-host", kfp.host, "--vertex-endpoint", vertex.url,
               "--substitution", "_TEMPLATE_BUCKET=ci-templates", "--substitution", "_SUBMIT=true",
               "--substitution", "_PIPELINE_ROOT=gs://ci-bucket/pipeline-root",
               "--substitution", "_SUBMIT_SET=output.base_dir=gs://ci-bucket/runs/mw data.path=gs://ci-bucket/flowers",
               "--timeout", "780"]
        started = time.monotonic()
        proc = subprocess.run(cmd, cwd=src, capture_output=True, text=True, timeout=840,
                              env=dict(os.environ, CI_LOCAL_TEST_MARKER=marker))
        seconds = time.monotonic() - started
        uploads, jobs = kfp.packages, list(vertex.calls("POST", r"/pipelineJobs$"))
    out = proc.stdout.splitlines()
    try:
        assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
        assert_no_processes_left(marker)
        # the flag that wins over the file, said first (one warning line); then what it substituted
        assert out[0] == "warning: --timeout 780 s wins over cloudbuild.yaml's timeout (7200 s)", out[:2]
        out = out[1:]
        assert out[0].startswith(f"ci-local: cloudbuild.yaml, 8 steps, as the trigger vertex-tf-pipelines-main runs "
                                 f"it (commit {sha[:7]}, branch main)")
        said = "\n".join(out[:20])
        for fragment in (f"the files of commit {sha[:12]} (git archive: no .git", "one after another (no step has waitFor)",
                         f"this interpreter, Python {sys.version.split()[0]}", f"on the engine {own_dockerd.host}",
                         f"{own_registry.host}: a `docker` on the docker steps' PATH pushes us-central1-docker.pkg.dev/PATH",
                         f"{kfp.host} (_TEMPLATE_HOST)", f"{vertex.url} (_API_ENDPOINT)", "credentials",
                         "python -m venv --system-site-packages .venv", "PYTEST_ADDOPTS='tests/test_cloudbuild.py'"):
            assert fragment in said, (fragment, said)
        # one line per step, in order, each SUCCESS with its wall time
        table = out[out.index("steps:") + 1:out.index("steps:") + 9]
        assert [line.split()[0] for line in table] == ["install", "unit-tests", "tags", "build-images", "push-images",
                                                         "compile-pipelines", "upload-templates", "submit"]
        assert all(re.fullmatch(r"\s+\S+\s+SUCCESS\s+\d+\.\d s", line) for line in table), table
        ws = rundir / "workspace"
        assert not (ws / ".git").exists() and not (ws / ".venv" / "lib" / "libbig.so").exists()
        assert (ws / ".venv" / "pyvenv.cfg").is_file()  # the install step's own .venv, beside which the tests ran
        unit = (rundir / "logs" / "01-unit-tests.log").read_text()
        assert re.search(r"\d+ passed", unit) and not re.search(r"\d+ (failed|errors?)\b", unit), unit[-2000:]
        # the images: pushed as Artifact Registry names to the local registry, pinned by the digest it answered
        pinned = (ws / "build/ci/images.txt").read_text().split()
        repos = [f"{PROJECT}/training/tf-trainer{suffix}" for suffix in ("", "-gpu", "-tpu")]
        assert [p.split(":")[0] for p in pinned] == [f"us-central1-docker.pkg.dev/{r}" for r in repos]
        client = own_dockerd.client(timeout_s=120)
        for variant, repo, ref in zip(("cpu", "gpu", "tpu"), repos, pinned):
            named, digest = ref.split("@")
            tag = named.rsplit(":", 1)[1]
            assert own_registry.manifest(repo, tag)[1] == digest and sorted(own_registry.tags(repo)) == sorted([tag, sha[:7]])
            assert f"      {ref}  (in {own_registry.host})" in out
            box = client.create_container(f"{own_registry.host}/{repo}:{tag}", command=["/bin/busybox", "cat", "/etc/variant"],
                                          network_disabled=True)
            try:
                client.start(box)
                client.wait(box, timeout=60)
                assert client.logs(box).decode().strip() == variant  # built with --build-arg VARIANT=<variant>
            finally:
                client.remove_container(box, force=True)
        # every preset compiled against its variant's pinned image, uploaded as a template tagged with the commit
        need = {"local": 0, "gpu-1x4": 1, "multiworker": 1, "parameter-server": 0, "tpu": 2}
        templates = (ws / "build/ci/templates.txt").read_text().split()
        for preset, i in need.items():
            compiled = (ws / f"build/ci/pipelines/{preset}.yaml").read_text()
            assert pinned[i] in compiled
            name = config_lib.load(preset).name
            (version,) = uploads[name]
            assert sha[:7] in uploads[name][version]["tags"] and uploads[name][version]["content"].decode() == compiled
            assert f"{kfp.host}/{name}/{version}" in templates
        import components

        assert {n.replace("_", "-") for n in components.NAMES} <= set(uploads)
        assert len(templates) == len(uploads) == len(components.NAMES) + len(need)
        # the submission: the multiworker pipeline with the gpu image, to the Vertex stand-in
        (job,) = jobs
        body = job.json()
        assert job.path.startswith(f"/v1/projects/{PROJECT}/locations/us-central1/pipelineJobs")
        assert pinned[1] in body["runtimeConfig"]["parameterValues"]["config_json"]
        assert body["runtimeConfig"]["gcsOutputDirectory"] == "gs://ci-bucket/pipeline-root"
        # the artifacts, as artifacts.objects would upload them
        start = next(i for i, line in enumerate(out) if line.startswith("artifacts (artifacts.objects"))
        assert f"gs://{PROJECT}_cloudbuild/pipelines/" in out[start]
        listed = [line.split()[0] for line in out[start + 1:] if line.startswith("  build/")]
        assert listed == [f"build/ci/pipelines/{p}.yaml" for p in sorted(need)] + ["build/ci/images.txt",
                                                                                   "build/ci/templates.txt"]
        print(f"ci-local end to end: {seconds:.0f} s\n" + "\n".join(table), file=sys.stderr)
    finally:
        client = own_dockerd.client(timeout_s=120)
        for image in client.images():
            for tag in image.get("RepoTags") or []:
                if tag.startswith((f"{own_registry.host}/{PROJECT}/", f"us-central1-docker.pkg.dev/{PROJECT}/")):
                    client.remove_image(tag, force=True)
        subprocess.run(["rm", "-rf", str(rundir), str(src)], check=False)
