"""A user's trainer image without an engine: what its generated context holds and leaves out, the generated
Dockerfile's layers, the content tag, and every bad input as one `error:` line (jobs/images/user.py)."""
from __future__ import annotations

import io
import os
import shutil
import tarfile
from pathlib import Path

import pytest

from jobs.images import user as user_image
from jobs.images.context import BuildError, content_tag, write_tar
from jobfile import config as config_lib
from jobfile.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "tabular-regressor"
BASE = "127.0.0.1:5000/training/tf-trainer:ctx-0123456789abcdef@sha256:" + "a" * 64
OTHER_BASE = "127.0.0.1:5000/training/tf-trainer:ctx-0123456789abcdef@sha256:" + "b" * 64
SA_KEY = '{"type": "service_account", "client_email": "x@p.iam.gserviceaccount.com", "private_key": "k"}'
ADC = '{"type": "authorized_user", "client_id": "c", "client_secret": "s", "refresh_token": "r"}'
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----\n"


@pytest.fixture
def project(tmp_path) -> Path:
    """The example project copied outside the repository, with the junk a real project folder collects."""
    src = tmp_path / "my-project"
    shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns("runs", "__pycache__"))
    junk = {
        ".git/HEAD": "ref: refs/heads/main\n", ".git/config": "[core]\n",
        ".venv/bin/python": "", "trainer/__pycache__/task.cpython-311.pyc": "x", "trainer/old.pyc": "x",
        "runs/regressor/model/saved_model.pb": "model", ".env": "TOKEN=1\n", "config/.env.local": "TOKEN=2\n",
        "sa-key.json": SA_KEY, "secrets/adc.json": ADC, "deploy/id_rsa": PEM,
        "settings.json": '{"private_key_path": "not a key", "lr": 0.1}',
        "notes/todo.md": "ignored by the user\n", "notes/keep.md": "kept by an exception\n",
        ".dockerignore": "# the user's own rules\nnotes/\n!notes/keep.md\n!.env\n",
    }
    for rel, text in junk.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text)
    return src


def _cfg(job: Path, *overrides: str):
    return config_lib.load(str(job), list(overrides))


def _context(plan, tmp_path, base=BASE, name="ctx"):
    text = user_image.dockerfile(base, plan, ["python", "-m", "trainer.task", "--epochs", "3"])
    return user_image.materialize(plan, text, tmp_path / name)


def test_the_context_holds_the_code_and_requirements_and_says_what_it_left_out(project):
    plan = user_image.plan(_cfg(project / "job.yaml"))
    assert sorted(plan.files) == [
        "code/eval.jsonl", "code/notes/keep.md", "code/requirements.txt", "code/sample.json", "code/settings.json",
        "code/trainer/data.py", "code/trainer/task.py", "requirements/requirements.txt"]
    assert plan.requirements == "requirements/requirements.txt"
    assert dict(plan.excluded) == {
        ".dockerignore": "always: the selection's own rules",
        "job.yaml": "always: this product's: a job file",  # the job files are not the trainer's code
        "tune.yaml": "always: this product's: a job file",
        ".env": "always: credential: .env file",  # the user's `!.env` cannot bring it back
        ".git/": "always: version control; 2 files",
        ".venv/": "always: virtualenv; 1 file",
        "config/.env.local": "always: credential: .env.local file",
        "deploy/id_rsa": "always: credential: holds a private key",
        "notes/": "your .dockerignore; 1 file",
        "runs/": "always: local runs' output; 1 file",
        "sa-key.json": "always: credential: JSON key file (private_key)",
        "secrets/adc.json": "always: credential: JSON key file (refresh_token)",
        "trainer/__pycache__/": "always: cache; 1 file",
        "trainer/old.pyc": "always: compiled Python",
    }


def test_output_base_dir_inside_the_source_folder_is_left_out(project):
    (project / "out" / "here").mkdir(parents=True)
    (project / "out" / "here" / "ckpt").write_text("x")
    (project / "out" / "other.txt").write_text("code")
    plan = user_image.plan(_cfg(project / "job.yaml", f"output.base_dir={project / 'out' / 'here'}"))
    assert ("out/here/", "always: the job's output.base_dir; 1 file") in plan.excluded
    assert "code/out/other.txt" in plan.files and not any(f.startswith("code/out/here") for f in plan.files)


def test_generated_dockerfile_layers_base_by_digest_then_requirements_then_code(project):
    plan = user_image.plan(_cfg(project / "job.yaml"))
    text = user_image.dockerfile(BASE, plan, ["python", "-m", "trainer.task", "--epochs", "3"])
    instructions = [line.split()[0] for line in text.splitlines() if line and not line.startswith("#")]
    assert instructions == ["FROM", "ARG", "COPY", "RUN", "COPY", "WORKDIR", "CMD"]
    assert f"FROM 127.0.0.1:5000/training/tf-trainer@sha256:{'a' * 64}\n" in text  # the digest, not the tag
    assert "COPY requirements/ /workspace/requirements/\n" in text
    assert "RUN pip install --no-cache-dir ${PIP_EXTRA_ARGS} -r /workspace/requirements/requirements.txt\n" in text
    assert text.index("COPY requirements/") < text.index("RUN pip") < text.index("COPY code/ /workspace/code/")
    assert "WORKDIR /workspace/code\n" in text and "ENTRYPOINT" not in text
    assert text.endswith('CMD ["python", "-m", "trainer.task", "--epochs", "3"]\n')
    assert str(project) not in text  # no machine path: the same project elsewhere gives the same tag


def test_without_requirements_there_is_no_pip_layer_and_with_wheels_it_is_offline(project, tmp_path):
    plan = user_image.plan(_cfg(project / "job.yaml", "trainer.requirements="))
    text = user_image.dockerfile(BASE, plan, ["python", "-m", "trainer.task"])
    assert "RUN" not in text and "requirements" not in text and next(iter(plan.files)).startswith("code/")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "extra-1.0-py3-none-any.whl").write_bytes(b"PK")
    plan = user_image.plan(_cfg(project / "job.yaml"), str(wheels))
    assert plan.wheels == ("requirements/wheels/extra-1.0-py3-none-any.whl",)
    assert "--no-index --find-links /workspace/requirements/wheels " in user_image.dockerfile(BASE, plan, ["x"])


def test_an_unpinned_base_is_refused():
    plan = user_image.Plan(Path("."), {}, "", (), ())
    with pytest.raises(BuildError, match="not pinned by digest"):
        user_image.dockerfile("127.0.0.1:5000/training/tf-trainer:ctx-1", plan, ["x"])


def test_the_tar_holds_exactly_the_plan(project, tmp_path):
    plan = user_image.plan(_cfg(project / "job.yaml"))
    ctx = _context(plan, tmp_path)
    out = io.BytesIO()
    write_tar(ctx, out)
    with tarfile.open(fileobj=io.BytesIO(out.getvalue())) as tar:
        names = tar.getnames()
    assert names == sorted(["Dockerfile", *plan.files])
    assert not any(".env" in n or "key" in n or ".git/" in n or "runs/" in n for n in names)


def test_tag_follows_code_requirements_and_base_not_junk(project, tmp_path):
    job = project / "job.yaml"

    def tag(name, base=BASE):
        return content_tag(_context(user_image.plan(_cfg(job)), tmp_path, base, name))

    first = tag("a")
    # junk, credentials, compiled files, the runs folder and mtimes change nothing
    (project / "runs" / "regressor" / "model" / "saved_model.pb").write_text("another model")
    (project / ".env").write_text("TOKEN=2\n")
    (project / "sa-key.json").write_text(SA_KEY.replace('"k"', '"k2"'))
    (project / ".git" / "HEAD").write_text("ref: refs/heads/other\n")
    (project / "notes" / "todo.md").write_text("changed\n")
    os.utime(project / "trainer" / "task.py", (1, 1))
    assert tag("b") == first
    # the same project copied elsewhere: the same tag
    elsewhere = tmp_path / "elsewhere" / "proj"
    shutil.copytree(project, elsewhere)
    assert content_tag(_context(user_image.plan(_cfg(elsewhere / "job.yaml")), tmp_path, BASE, "c")) == first
    # the base image's digest, the code, the requirements: each a new tag
    assert tag("d", OTHER_BASE) != first
    task = project / "trainer" / "task.py"
    task.write_text(task.read_text().replace("default=32", "default=64"))
    code_changed = tag("e")
    (project / "requirements.txt").write_text("numpy>=1.26\nPyYAML>=6\n")
    assert len({first, code_changed, tag("f")}) == 3


@pytest.mark.parametrize("line, fragment", [
    ("-r base.txt", "names another file"),
    ("--constraint=c.txt", "names another file"),
    ("-e .", "installs a local folder"),
    ("./libs/mylib", "installs a local folder"),
    ("--extra-index-url https://me:s3cret@pypi.example.com/simple", "user:password in a URL"),
])
def test_requirements_the_layer_cannot_install_are_one_problem(project, line, fragment):
    (project / "requirements.txt").write_text(f"numpy>=1.26\n{line}\n")
    with pytest.raises(ConfigError) as err:
        user_image.plan(_cfg(project / "job.yaml"))
    (problem,), = [err.value.problems]
    assert problem.field == "trainer.requirements" and fragment in problem.message and "line 2" in problem.message


def _build(capsys, *args: str) -> tuple[int, list[str], list[str]]:
    from pipelines.run import main

    status = main(["build", *args])
    out, err = capsys.readouterr()
    return status, out.splitlines(), err.splitlines()


@pytest.mark.parametrize("change, args, fragments", [
    ("source_dir", (), ("error: trainer.source_dir:", "is not a folder")),
    ("requirements", (), ("error: trainer.requirements:", "does not exist")),
    ("module", (), ("error: trainer.module:", "is not importable", "valid choices: trainer.task")),
    ("", ("--image", "127.0.0.1:5000/t/mine:v1"), ("error: --image", "give the repository only")),
    ("", ("--image", "127.0.0.1:5000/t/mine@sha256:" + "c" * 64), ("error: --image", "give the repository only")),
    ("", ("--image", "us-central1-docker.pkg.dev/my-project/t/mine"), ("error: --image", "placeholder project")),
    ("", ("--image", ""), ("error: --image:", "--image us-central1-docker.pkg.dev/PROJECT/REPO/my-trainer")),
    ("", ("--set", "container.base_image=127.0.0.1:5000/t/tf-trainer:ctx-1"),
     ("error: container.base_image", "must be pinned by digest")),
    ("", ("--wheels", "/nonexistent"), ("error: --wheels:", "holds no .whl files")),
])
def test_bad_inputs_are_one_error_line_and_exit_2(project, capsys, change, args, fragments):
    job = project / "job.yaml"
    if change == "source_dir":
        shutil.rmtree(project / "trainer")
        job.write_text(job.read_text().replace("source_dir: .", "source_dir: ../missing"))
    elif change == "requirements":
        (project / "requirements.txt").unlink()
    elif change == "module":
        job.write_text(job.read_text().replace("module: trainer.task", "module: trainer.taks"))
    args = args if "--image" in args else ("--image", "127.0.0.1:5000/t/mine", *args)
    status, out, err = _build(capsys, "--config", str(job), *args)
    assert status == 2, (out, err)
    assert len(err) == 1, err
    for fragment in fragments:
        assert fragment in err[0], err[0]
    assert not any("@sha256:" in line for line in out)


def test_the_cloud_build_backend_without_its_flags_is_one_line_per_missing_flag(project, capsys):
    status, out, err = _build(capsys, "--config", str(project / "job.yaml"), "--image", "127.0.0.1:5000/t/mine",
                              "--backend", "cloudbuild")
    assert status == 2 and [line.split(":")[1].strip() for line in err] == ["--project", "--staging-bucket"], err
    assert all("is required" in line for line in err)


def test_a_job_without_its_own_trainer_still_builds_the_trainer_image_only(capsys, monkeypatch):
    """The presets have no trainer: section: run.py build keeps its old meaning (checked up to the engine)."""
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    status, out, err = _build(capsys, "--image", "127.0.0.1:5000/t/tf-trainer")
    assert status == 1 and len(err) == 1 and "no Docker engine reachable" in err[0]
    assert out[0].startswith("image 127.0.0.1:5000/t/tf-trainer:ctx-") and "variant cpu" in out[0]


def test_wheels_without_a_users_trainer_is_one_error_line(capsys):
    status, out, err = _build(capsys, "--image", "127.0.0.1:5000/t/tf-trainer", "--wheels", "/tmp")
    assert status == 2 and err == ["error: --wheels: only for a job with its own trainer (trainer.module); the trainer "
                                   "image installs offline from containers/wheels/ in its context"]
