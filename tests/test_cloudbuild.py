"""cloudbuild.yaml and cloudbuild-trigger.yaml: valid resources, and every step run in order on this machine.

How the steps are run here, as Cloud Build would run them:

* the source is a fresh copy of the repository's tracked files (``jobs.ci.cloudbuild_steps.copy_source``: never a
  virtualenv, build outputs or caches lying in the checkout), the working directory of every step; files
  pass between steps through it (``/workspace`` on Cloud Build);
* each step's ``script`` runs with the substitutions and built-ins as environment variables
  (``options.automapSubstitutions``), user substitutions resolved against the built-ins
  (``options.dynamicSubstitutions``);
* python steps run for real (tags, compiling every preset, uploading templates to a local stand-in of
  the Artifact Registry KFP host, submitting to a local stand-in of Vertex AI);
* docker steps (``gcr.io/cloud-builders/docker``, no engine here) run their script for real with a
  ``docker`` on PATH that records each command line; the test checks those exact commands;
* ``install`` (pip from PyPI) and ``unit-tests`` (this very test suite: never run recursively) are
  checked for their exact commands; this machine's interpreter stands in for ``.venv``.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from jobs.ci.cloudbuild_steps import copy_source
from tests.conftest import ROOT

BUILD_FILE, TRIGGER_FILE = ROOT / "cloudbuild.yaml", ROOT / "cloudbuild-trigger.yaml"
BUILTINS = {"PROJECT_ID", "PROJECT_NUMBER", "LOCATION", "BUILD_ID", "SHORT_SHA", "COMMIT_SHA", "REPO_NAME",
            "REPO_FULL_NAME", "BRANCH_NAME", "TAG_NAME", "REF_NAME", "TRIGGER_NAME", "TRIGGER_BUILD_CONFIG_PATH",
            "SERVICE_ACCOUNT_EMAIL", "SERVICE_ACCOUNT"}
PROJECT, BUILD_ID = "my-proj-123", "5f0c1d2e-0000-4000-8000-00000000abcd"
VARIANTS = ["cpu", "gpu", "tpu"]
PRESETS = ["local", "gpu-1x4", "multiworker", "parameter-server", "tpu"]


def build_doc() -> dict:
    return yaml.safe_load(BUILD_FILE.read_text())


def steps() -> dict[str, dict]:
    return {s["id"]: s for s in build_doc()["steps"]}


def script_lines(step_id: str) -> list[str]:
    return [line.strip() for line in steps()[step_id]["script"].splitlines() if line.strip()]


# ---- the files are what the APIs accept ------------------------------------------------------------

def test_cloudbuild_parses_as_a_build_resource():
    from google.cloud.devtools import cloudbuild_v1
    from google.protobuf import json_format

    build = json_format.ParseDict(build_doc(), cloudbuild_v1.Build.pb(cloudbuild_v1.Build()))  # unknown fields fail
    assert [s.id for s in build.steps] == ["install", "unit-tests", "tags", "build-images", "push-images",
                                           "compile-pipelines", "upload-templates", "submit"]
    assert all(s.script.startswith("#!/usr/bin/env bash\nset -euo pipefail\n") and not s.args for s in build.steps)
    assert build.options.automap_substitutions and build.options.dynamic_substitutions
    assert build.timeout.seconds == 7200


def test_the_trigger_parses_as_a_build_trigger_and_runs_this_build():
    from google.cloud.devtools import cloudbuild_v1
    from google.protobuf import json_format

    doc = yaml.safe_load(TRIGGER_FILE.read_text())
    trigger = json_format.ParseDict(doc, cloudbuild_v1.BuildTrigger.pb(cloudbuild_v1.BuildTrigger()))
    assert (ROOT / trigger.filename).resolve() == BUILD_FILE
    assert trigger.github.push.branch == "^main$"
    assert set(trigger.substitutions) <= set(build_doc()["substitutions"]), "the trigger sets only known ones"
    assert not any(re.fullmatch(pattern.replace("**", ".*").replace("*", "[^/]*"), path)
                   for pattern in trigger.ignored_files for path in ("cloudbuild.yaml", "containers/Dockerfile",
                                                                     "jobs/cloud/apis/cloudbuild.py", "trainers/train.py"))


def test_every_variable_a_step_reads_is_a_substitution_a_builtin_or_its_own():
    doc = build_doc()
    defined = set(doc["substitutions"]) | BUILTINS
    for step in doc["steps"]:
        text = step["script"]
        assigned = set(re.findall(r"\b([a-z_]+)=", text)) | set(re.findall(r"for (\w+) in", text))
        used = set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", text))
        assert used <= defined | assigned, (step["id"], used - defined - assigned)
    for value in [doc["artifacts"]["objects"]["location"], *doc["substitutions"].values()]:
        assert set(re.findall(r"\$\{?([A-Z_][A-Z0-9_]*)", str(value))) <= defined, value


def test_the_unit_test_step_runs_the_fast_suite_and_install_gets_its_dependencies():
    assert script_lines("install")[2:] == [
        "python -m venv .venv", ".venv/bin/pip install --quiet --disable-pip-version-check -e '.[cpu,beam,dev]'"]
    assert script_lines("unit-tests")[2:] == [
        ". .venv/bin/activate",
        '# the README\'s "no TensorFlow process, no engine, no browser" selection (tests/tiers.py), in parallel',
        'python -m pytest -q -m "unit or process" -p no:cacheprovider --durations=20']
    readme = (ROOT / "README.md").read_text()
    assert 'python -m pytest -q -m "unit or process"' in readme  # the same selection, named there
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^dev = \[.*"pytest', pyproject, re.M), "the dev extra brings pytest"


# ---- the build's source: never what happens to lie in the checkout -------------------------------------

LYING_AROUND = [".venv/bin/activate", ".venv/lib/python3.11/site-packages/big.py", "venv/pyvenv.cfg",
                "build/ci/images.txt", "jobs/__pycache__/ci.cpython-311.pyc", ".pytest_cache/v/x", ".mypy_cache/x",
                ".ruff_cache/x", "containers/wheels/tensorflow-2.21.0-cp311-none-any.whl", "runs/local/metrics.json",
                "x.egg-info/PKG-INFO", ".coverage", ".tox/py311/x", ".env"]


TRACKED = [".dockerignore", ".gitignore", "containers/Dockerfile", "jobs/ci/cloudbuild_steps.py", "pyproject.toml"]
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs git (Cloud Build's python image has none)")


def _tree(root: Path) -> Path:
    """This repository's ignore files and a few sources, with a virtualenv (a symlink to this interpreter as
    .venv/bin/python, as a real venv has), build outputs and caches lying among them."""
    for rel in TRACKED:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, root / rel)
    for rel in LYING_AROUND:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("not source\n")
    (root / ".venv" / "bin" / "python").symlink_to(sys.executable)
    (root / "notes.txt").write_text("untracked, not ignored\n")
    return root


def _checkout(tmp_path: Path) -> Path:
    """:func:`_tree` as a git checkout whose commit holds the sources alone."""
    root = tmp_path / "checkout"
    for rel in TRACKED:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, root / rel)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q"], cwd=root, check=True)
    subprocess.run([*git, "add", "-A"], cwd=root, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "source"], cwd=root, check=True)
    return _tree(root)


@pytest.mark.unit  # names a launcher, starts nothing: the launch is refused first
@needs_git
def test_a_checkout_with_a_virtualenv_build_outputs_and_caches_gives_only_its_source(tmp_path):
    from jobs.ci.cloudbuild_steps import copy_source, source_files

    root = _checkout(tmp_path)
    assert source_files(root) == TRACKED  # what a trigger builds (the commit's files)
    assert source_files(root, "worktree") == sorted(TRACKED + ["notes.txt"])  # what gcloud builds submit uploads
    ws = tmp_path / "workspace"
    assert copy_source(root, ws) == len(TRACKED)
    (ws / ".venv" / "bin").mkdir(parents=True)  # what the install step makes: nothing there before it


def test_without_git_the_source_is_what_gitignore_keeps(tmp_path):
    """Inside Cloud Build's unit-tests step: no .git (and no git), a .venv of the install step's, the earlier
    steps' build/ beside the sources."""
    from jobs.ci.cloudbuild_steps import source_files

    ws = _tree(tmp_path / "workspace")
    assert source_files(ws) == sorted(TRACKED + ["notes.txt"])


def test_the_image_build_context_never_holds_a_virtualenv_or_caches(tmp_path):
    from jobs.images.context import make_context

    root = _tree(tmp_path / "src")
    for rel in ("jobs//venv/lib/x.py", "jobs/venv/bin/python3", "trainers/.mypy_cache/y", "components/.ipynb_checkpoints/z"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("never in an image\n")
    files = make_context(root).files
    assert "jobs/ci/cloudbuild_steps.py" in files and "pyproject.toml" in files
    assert not [f for f in files if re.search(r"(^|/)(\.?venv|\.mypy_cache|\.ipynb_checkpoints|__pycache__|build)/", f)], files
    assert "containers/wheels/tensorflow-2.21.0-cp311-none-any.whl" in files  # wheels for an offline build: on purpose


# ---- running the steps ---------------------------------------------------------------------------------

FAKE_DOCKER = '''#!{python}
"""docker, as far as the build steps use it: record the command line; inspect answers a RepoDigest."""
import hashlib, json, os, sys
with open(os.environ["FAKE_DOCKER_LOG"], "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
if sys.argv[1] == "inspect":
    image = sys.argv[-1]
    print(image.rsplit(":", 1)[0] + "@sha256:" + hashlib.sha256(image.encode()).hexdigest())
'''


@pytest.fixture
def workspace(tmp_path) -> Path:
    """The source as Cloud Build gets it, a docker that records, and this interpreter as ``.venv``."""
    ws = tmp_path / "workspace"
    # the source alone: tracked files (no .git inside Cloud Build: what .gitignore does not ignore), never
    # the checkout's .venv, build outputs or caches (jobs/ci/cloudbuild_steps.py, the one definition of a build's source)
    copy_source(ROOT, ws)
    (ws / ".venv" / "bin").mkdir(parents=True)
    (ws / ".venv" / "bin" / "activate").write_text(f'export PATH="{Path(sys.executable).parent}:$PATH"\n')
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "docker").write_text(FAKE_DOCKER.format(python=sys.executable))
    (fake_bin / "docker").chmod(0o755)
    return ws


def substitutions(short_sha: str, **overrides: str) -> dict[str, str]:
    env = {"PROJECT_ID": PROJECT, "BUILD_ID": BUILD_ID, "SHORT_SHA": short_sha, "LOCATION": "global",
           "COMMIT_SHA": (short_sha + "0" * 33) if short_sha else "", "BRANCH_NAME": "main" if short_sha else ""}
    for key, value in {**build_doc()["substitutions"], **overrides}.items():  # dynamic: ${PROJECT_ID} etc.
        env[key] = re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], str(value))
    return env


def run_step(ws: Path, step_id: str, subs: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    script = ws.parent / f"step-{step_id}.sh"
    script.write_text(steps()[step_id]["script"])
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    env = {**os.environ, **subs, "PATH": f"{ws.parent / 'bin'}:{os.environ['PATH']}",
           "FAKE_DOCKER_LOG": str(ws.parent / "docker.log"), "NO_GCE_CHECK": "true"}
    env.pop("PYTHONPATH", None)  # the step sees the workspace's sources, not this checkout's
    return subprocess.run([str(script)], cwd=ws, env=env, capture_output=True, text=True, timeout=timeout)


def docker_calls(ws: Path) -> list[list[str]]:
    log = ws.parent / "docker.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def expected_tags(ws: Path, alias: str) -> dict[str, tuple[str, str]]:
    """Computed independently of the steps: what `run.py build` tags the same sources with."""
    from jobs import images
    from jobs.images.context import content_tag, make_context

    ctx = make_context(ws, "containers/Dockerfile")
    base = f"us-central1-docker.pkg.dev/{PROJECT}/training/tf-trainer"
    return {v: (f"{images.repository_for(base, v)}:{content_tag(ctx, {'VARIANT': v})}",
                f"{images.repository_for(base, v)}:{alias}") for v in VARIANTS}


def run_image_steps(ws: Path, subs: dict[str, str]) -> None:
    for step_id in ("tags", "build-images", "push-images"):
        proc = run_step(ws, step_id, subs)
        assert proc.returncode == 0, (step_id, proc.stdout[-2000:], proc.stderr[-3000:])


def check_docker_commands(ws: Path, alias: str) -> dict[str, str]:
    """The exact docker command lines, in order; returns {variant: pinned reference}."""
    tags = expected_tags(ws, alias)
    builds = [["build", "-f", "containers/Dockerfile", "--build-arg", f"VARIANT={v}", "-t", tags[v][0],
               "-t", tags[v][1], "."] for v in VARIANTS]
    pushes = [c for v in VARIANTS for c in (["push", tags[v][0]], ["push", tags[v][1]],
                                             ["inspect", "--format", "{{index .RepoDigests 0}}", tags[v][0]])]
    assert docker_calls(ws) == builds + pushes
    import hashlib

    pinned = {v: f"{tags[v][0]}@sha256:{hashlib.sha256(tags[v][0].encode()).hexdigest()}" for v in VARIANTS}
    assert {v: (ws / f"build/ci/{v}.digest").read_text().strip() for v in VARIANTS} == pinned
    assert (ws / "build/ci/images.txt").read_text().split() == [pinned[v] for v in VARIANTS]
    return pinned


def test_a_manual_build_without_short_sha_tags_manual_build_id(workspace):
    run_image_steps(workspace, substitutions(short_sha=""))
    check_docker_commands(workspace, alias=f"manual-{BUILD_ID}")


def test_a_triggered_build_runs_every_step_in_order(workspace):
    from tests.standins.kfp_registry import KfpRegistryStandIn
    from jobfile import config as config_lib

    with KfpRegistryStandIn(project=PROJECT, repo="pipelines") as registry:
        subs = substitutions(short_sha="abc1234", _TEMPLATE_HOST=f"{registry.url}/{PROJECT}/pipelines",
                             _TEMPLATE_BUCKET="ci-templates")
        run_image_steps(workspace, subs)
        pinned = check_docker_commands(workspace, alias="abc1234")
        outputs = {}
        for step_id in ("compile-pipelines", "upload-templates", "submit"):
            proc = run_step(workspace, step_id, subs)
            assert proc.returncode == 0, (step_id, proc.stdout[-2000:], proc.stderr[-3000:])
            outputs[step_id] = proc.stdout
        uploads = registry.packages
    # every preset compiled against the image of the variant its accelerators need, pinned by digest
    need = {"local": "cpu", "gpu-1x4": "gpu", "multiworker": "gpu", "parameter-server": "cpu", "tpu": "tpu"}
    for preset in PRESETS:
        compiled = yaml.safe_load((workspace / f"build/ci/pipelines/{preset}.yaml").read_text())
        cfg = config_lib.load_json(compiled["root"]["inputDefinitions"]["parameters"]["config_json"]["defaultValue"])
        assert cfg.container.image_uri == pinned[need[preset]], preset
    # every component published beside them, in the cpu image by digest, tagged with the commit
    import components

    published = {name.replace("_", "-") for name in components.NAMES}
    for name in published:
        (version,) = uploads[name].values()
        assert "abc1234" in version["tags"] and pinned["cpu"].encode() in version["content"]
    # every preset uploaded as a template, tagged with the commit, holding the same pinned image
    assert set(uploads) - published == {config_lib.load(p).name for p in PRESETS}
    for preset in PRESETS:
        (version,) = uploads[config_lib.load(preset).name].values()
        assert "abc1234" in version["tags"]
        assert pinned[need[preset]] in version["content"].decode() if isinstance(version["content"], bytes) \
            else pinned[need[preset]] in version["content"]
    # the artifacts the build keeps exist where artifacts.objects.paths says
    for pattern in build_doc()["artifacts"]["objects"]["paths"]:
        assert list(workspace.glob(pattern)), pattern
    assert "nothing submitted" in outputs["submit"]


def test_submit_true_sends_the_pinned_pipeline_to_vertex(workspace):
    from tests.standins.vertex import VertexStandIn

    with VertexStandIn() as vertex:
        subs = substitutions(short_sha="abc1234", _SUBMIT="true", _PIPELINE_ROOT="gs://ci-bucket/pipeline-root",
                             _API_ENDPOINT=vertex.url, _TEMPLATE_REPOSITORY="",
                             _SUBMIT_SET="output.base_dir=gs://ci-bucket/runs/mw data.path=gs://ci-bucket/flowers")
        run_image_steps(workspace, subs)
        proc = run_step(workspace, "submit", subs)
        assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-3000:])
        created = vertex.calls("POST", r"/pipelineJobs$")
    assert len(created) == 1 and created[0].path.startswith(f"/v1/projects/{PROJECT}/locations/us-central1/")
    body = created[0].json()
    config_json = body["runtimeConfig"]["parameterValues"]["config_json"]
    assert (workspace / "build/ci/gpu.digest").read_text().strip() in config_json
    assert body["runtimeConfig"]["gcsOutputDirectory"] == "gs://ci-bucket/pipeline-root"


def test_submit_true_without_a_pipeline_root_is_one_error_line(workspace):
    proc = run_step(workspace, "submit", substitutions(short_sha="", _SUBMIT="true"))
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: _SUBMIT=true needs _PIPELINE_ROOT=gs://BUCKET/PATH"


def test_a_preset_whose_variant_was_not_built_stops_the_compile_step(workspace):
    subs = substitutions(short_sha="abc1234", _VARIANTS="cpu")
    run_step(workspace, "tags", subs)
    (workspace / "build/ci/cpu.digest").write_text("us-central1-docker.pkg.dev/p/r/tf-trainer:t@sha256:" + "0" * 64)
    proc = run_step(workspace, "compile-pipelines", subs)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: gpu-1x4 needs the gpu image, which this build did not push (build/ci/gpu.digest is missing): "
        "add gpu to _VARIANTS")


def test_templates_are_not_uploaded_without_a_bucket_of_their_own(workspace):
    """A template carries only what submit accepts: without _TEMPLATE_BUCKET the presets would name the
    placeholder bucket, so no template is uploaded (and the step says why); the components, which name no
    bucket, are published all the same."""
    import components
    from tests.standins.kfp_registry import KfpRegistryStandIn

    with KfpRegistryStandIn(project=PROJECT, repo="pipelines") as registry:
        subs = substitutions(short_sha="abc1234", _TEMPLATE_HOST=f"{registry.url}/{PROJECT}/pipelines")
        run_image_steps(workspace, subs)
        proc = run_step(workspace, "upload-templates", subs)
        assert proc.returncode == 0, proc.stderr
        assert set(registry.packages) == {name.replace("_", "-") for name in components.NAMES}
    assert "_TEMPLATE_BUCKET is empty: templates not uploaded" in proc.stdout
