"""cloudbuild.yaml is a valid Cloud Build resource and its steps point at files that exist."""
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def test_cloudbuild_parses_as_a_build_resource():
    from google.cloud.devtools import cloudbuild_v1
    from google.protobuf import json_format

    doc = yaml.safe_load((ROOT / "cloudbuild.yaml").read_text())
    build = json_format.ParseDict(doc, cloudbuild_v1.Build.pb(cloudbuild_v1.Build()))  # rejects unknown fields
    assert [s.id for s in build.steps] == ["build-image", "push-image", "validate-config", "compile-pipeline"]
    assert build.timeout.seconds == 3600


def test_cloudbuild_refers_to_real_files_and_defined_substitutions():
    doc = yaml.safe_load((ROOT / "cloudbuild.yaml").read_text())
    build_args = doc["steps"][0]["args"]
    assert (ROOT / build_args[build_args.index("-f") + 1]).is_file()
    preset = doc["substitutions"]["_PRESET"]
    assert (ROOT / "trainers" / "configs" / f"{preset}.yaml").is_file()
    text = (ROOT / "cloudbuild.yaml").read_text()
    import re

    used = set(re.findall(r"\$\{(_[A-Z_]+)\}", text))
    assert used <= set(doc["substitutions"]), used - set(doc["substitutions"])
