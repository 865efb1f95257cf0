"""Reusable KFP v2 components: each step of the chain from source to a registered model, usable in any
pipeline, one folder each (``<name>/component.py``, the definition; ``<name>/component.yaml``, generated
from it).

    from components.train.component import train          # a definition (in components.base.DEFAULT_IMAGE)
    verify_model = components.definition("verify_model")   # the same, by name
    c = components.published("REPO/tf-trainer@sha256:...")   # the published YAMLs, in your image
    verify_model = kfp.components.load_component_from_file("components/verify_model/component.yaml")

=====================  ====================================================  ==========================================
component              in                                                    out
=====================  ====================================================  ==========================================
validate_config        config JSON, image, location                          validated config, Vertex worker pool specs,
                                                                             output folders, Model Registry fields
build_image            config JSON, a gs:// build context                    the trainer image by digest
prepare_data           config JSON                                           Dataset (TFRecord shards)
train                  config JSON, Dataset (optional)                       Model, Metrics, checkpoints, TensorBoard logs
tune                   config JSON (a tuning section), Dataset (optional)    the better of the best trial's and the
                                                                             baseline's Model, Metrics, the study
custom_training_job    the Vertex job spec (validate_config's outputs)       gcp_resources (the CustomJob)
hyperparameter_        a tuning section, the trials' CustomJob spec          gcp_resources, the best trial (JSON, its
tuning_job                                                                   model folder, Model)
pick_model             the tuning job's study, the baseline CustomJob's      the better of the best trial's and the
                       gcp_resources, config JSON, the run folder            baseline's Model, the study, its choice
verify_model           Model, sample request, Dataset (optional)             verified Model, Metrics, verification record
gate                   Model, verification, training Metrics, TensorBoard    the same Model (only when it passes the
                       logs, tuning metric, config JSON, parent model        bars of serving.gate), Metrics, the record
upload_model           Model                                                 google.VertexModel (or the request, dry run)
report                 verification, TensorBoard logs, checkpoints, config   HTML, Markdown, ClassificationMetrics
check_plan             validated config, location, project                   nothing: fails when the plan's checks fail
notify                 config JSON, the run's final state (exit handler)     the run's end sent to the job's webhook
=====================  ====================================================  ==========================================

The pipeline ``run.py`` runs (``pipelines/training_pipeline.py``) is built from :func:`published`: the
very files a KFP user loads. ``python pipelines/run.py components --image IMAGE --out DIR`` writes the set
for an image; ``UPDATE_EXPECTED=1 python -m pytest tests/test_components.py`` regenerates the committed
files, and that test fails when a definition changed without them.
"""
from __future__ import annotations

import copy
import importlib
import os
import types
from pathlib import Path

#: Every component, in pipeline order.
NAMES = ("validate_config", "build_image", "check_plan", "prepare_data", "train", "tune", "custom_training_job",
         "hyperparameter_tuning_job", "pick_model", "verify_model", "gate", "upload_model", "report", "notify")
HERE = Path(__file__).resolve().parent
YAML_NAME = "component.yaml"

__all__ = ["NAMES", "definition", "published", "yaml_path", "load_yaml", "write_yamls", "with_image"]


def definition(name: str):
    """The Python definition of component ``name`` (a KFP ``PythonComponent``): ``components.<name>.component.<name>``.
    ``components.<name>`` is the component's package (its folder), as for any package."""
    if name not in NAMES:
        raise KeyError(f"no component {name!r}; components: {', '.join(NAMES)}")
    return getattr(importlib.import_module(f"components.{name}.component"), name)


def with_image(component, image: str):
    """A copy of ``component`` (a definition or a loaded YAML) that runs in ``image``."""
    out = copy.deepcopy(component)
    out.component_spec.implementation.container.image = image
    return out


def yaml_path(name: str, root: str | os.PathLike = HERE) -> Path:
    return Path(root) / name / YAML_NAME


def published(image: str | None = None) -> types.SimpleNamespace:
    """Every component loaded from its committed ``component.yaml`` (what a KFP user loads), in ``image``
    when given."""
    out = {}
    for name in NAMES:
        loaded = load_yaml(yaml_path(name))
        out[name] = with_image(loaded, image) if image else loaded
    return types.SimpleNamespace(**out)


def load_yaml(path: str | os.PathLike):
    """``kfp.components.load_component_from_file`` for a KFP v2 component YAML (every ``component.yaml`` here),
    parsed with libyaml's C loader where PyYAML has it: kfp parses with the pure-Python ``yaml.safe_load_all``,
    0.07 s per file here (0.9 s of every local run's start for the twelve; the C loader: 0.1 s), and it builds
    the same ``ComponentSpec`` from the same two documents (``ComponentSpec.from_ir_dicts``) and the description
    kfp reads from the file's ``# Description:`` comment (:func:`_description`; the IR holds none). Without
    ``kfp.components``, whose loader imports ``requests`` for URLs (0.25 s). Anything else (a v1 YAML, no C
    loader) goes through kfp's own loader."""
    import yaml
    from kfp.dsl import structures, yaml_component

    text = Path(path).read_text(encoding="utf-8")
    loader = getattr(yaml, "CSafeLoader", None)
    documents = list(yaml.load_all(text, Loader=loader)) if loader is not None else []
    if len(documents) not in (1, 2) or not isinstance(documents[0], dict) or "implementation" in documents[0]:
        from kfp.components import load_component_from_text

        return load_component_from_text(text)  # no C loader, kfp's own errors, or its v1 path
    spec = structures.ComponentSpec.from_ir_dicts(documents[0], documents[1] if len(documents) == 2 else {})
    if not spec.description:
        spec.description = _description(text)
    return yaml_component.YamlComponent(component_spec=spec, component_yaml=text)


def _description(text: str) -> str | None:
    """The description kfp's compiler writes as comments at the head of a component YAML (``# Description: ...``
    on the third line, continued by lines starting ``#             ``), read as
    ``kfp.dsl.structures.ComponentSpec.from_yaml_documents`` reads it (kfp 2.x; tested against it)."""
    heading, more = "# Description: ", "#             "
    if heading not in text:
        return None
    lines = text.splitlines()
    description, index = lines[2], 3
    while index < len(lines) and lines[index][:len(more)] == more:
        description += "\n" + lines[index][len(more) + 1:]
        index += 1
    return description[len(heading):]


def write_yamls(out_dir: str | os.PathLike, image: str | None = None) -> list[Path]:
    """Compile every definition to ``<out_dir>/<name>/component.yaml`` (in ``image`` when given)."""
    from kfp import compiler

    paths = []
    for name in NAMES:
        component = definition(name)
        if image:
            component = with_image(component, image)
        path = yaml_path(name, out_dir)
        path.parent.mkdir(parents=True, exist_ok=True)
        compiler.Compiler().compile(component, str(path))
        paths.append(path)
    return paths
