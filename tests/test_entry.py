"""The entry points a newcomer meets first: the README's two commands, and `vtp`, the console command
`pip install` puts on the PATH, which does everything `python pipelines/run.py` does from any folder."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _vtp() -> str:
    found = shutil.which("vtp", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    if found is None:
        pytest.fail("`vtp` is not installed beside this interpreter: pip install -e . installs it ([project.scripts])")
    return found


def test_the_readme_opens_with_the_two_commands_and_they_name_real_extras():
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", readme, re.S).group(1).strip().splitlines()
    run, test = (line.split("#")[0].strip() for line in block[:2])
    assert run == 'python -m pip install -e ".[cpu]" && python pipelines/run.py'
    assert test == 'python -m pip install -e ".[cpu,beam,dev]" && python -m pytest -q'
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert {"cpu", "beam", "dev"} <= set(extras)
    # the main job needs only the base and a TensorFlow extra; dev is the test tools alone
    assert not any(d.startswith(("apache-beam", "pytest", "selenium", "tensorflow")) for d in project["dependencies"])
    assert all(d.split(">")[0].split("=")[0] in ("pytest", "hypothesis", "pytest-timeout", "pytest-xdist",
                                                 "cryptography", "selenium", "google-apps-chat") for d in extras["dev"])
    assert project["scripts"] == {"vtp": "pipelines.run:main"}
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'pip install -q -e ".[cpu,beam,dev]"' in ci and "python -m pytest -q" in ci


def test_vtp_runs_from_any_folder_and_says_vtp(tmp_path):
    vtp = _vtp()
    help_ = subprocess.run([vtp, "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert help_.returncode == 0 and help_.stdout.startswith("usage: vtp ")
    ok = subprocess.run([vtp, "validate", "local"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("valid project job config: strategy multi_worker")
    typo = subprocess.run([vtp, "valdate", "local"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert typo.returncode == 2 and typo.stderr.strip() == (
        "error: 'valdate' is not a command (did you mean 'validate'?); valid choices: validate, plan, apply, hardware, build, "
        "upload-template, schedule, register-model, components, runs, logs, ci-local, or none to run the pipeline (see "
        "--help)")
    runs = subprocess.run([vtp, "runs", "list", "--root", str(tmp_path)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert runs.returncode == 0, runs.stderr
