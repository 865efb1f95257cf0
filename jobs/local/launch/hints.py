"""Known failures of users' trainers, each recognised in a replica's output and explained in one line.

One place for "we have seen this before": the launcher adds the hint under a failed replica's error line, the
train step says the no-model line, a study names the flag its trainer refused. A hint says what works for the
code it sees: which Keras the trainer's source imports (:func:`keras_imports`, read with ``ast``, never run)
decides whether ``TF_USE_LEGACY_KERAS`` helps at all (it switches ``tf.keras`` only; ``import keras`` is Keras 3
whatever the variable says, FACTS.md) and how a model is written to ``AIP_MODEL_DIR``.
"""
from __future__ import annotations

import ast
import os
import re
from typing import Iterable, Mapping

KERAS3 = "keras"          # import keras / from keras import ...: Keras 3 itself
TF_KERAS = "tf.keras"     # from tensorflow import keras, tf.keras.*: Keras 3, or tf_keras with the variable
LEGACY = "tf_keras"       # import tf_keras: Keras 2
#: folders never read for imports (a user's runs, virtual environments, caches)
_SKIP_DIRS = {"runs", "__pycache__", "node_modules", "site-packages", "venv", "env", "build", "dist"}
_MAX_FILES = 300

MULTI_WORKER_FIT = re.compile(r"Attempt to convert a value \(PerReplica|Invalid reduction dimension 0 for input with "
                              r"0 dimensions")
NO_TF_KERAS = re.compile(r"No module named '?tf_keras")
#: two replicas saving a SavedModel (or a checkpoint) into one folder at once: the first to merge its variables
#: removes the temporary folder the other is still merging from (seen as NotFoundError or InvalidArgumentError)
MERGE_V2_CHECKPOINTS = re.compile(r"MergeV2Checkpoints.*variables_temp|variables_temp.*MergeV2Checkpoints")
#: the one rule for a model written by more than one replica (TensorFlow's multi-worker guide), said by every hint
#: that leads to a save and by the launcher's check of the model folder (``jobs.local.launch.model_watch``)
SAVE_RULE = ("only the chief writes AIP_MODEL_DIR; every other replica saves to a throwaway folder of its own "
             "(TensorFlow's multi-worker guide): trainers.outputs.model_dir() gives each replica its folder in one call "
             "(docs/trainer.md)")
#: argparse's usage error, as ``parser.error`` prints it: ``task.py: error: unrecognized arguments: --x=1``
ARGPARSE_ERROR = re.compile(r"^[\w.\-/]+: error: (.+)$")
UNRECOGNIZED = re.compile(r"unrecognized arguments: (.+)$")
INVALID_VALUE = re.compile(r"argument (--[\w-]+)(?:/[^:]*)?: invalid")


def legacy_keras_set(env: Mapping[str, str] | None) -> bool:
    """``TF_USE_LEGACY_KERAS`` as TensorFlow reads it (``1`` or ``true``, any case)."""
    return str((env or {}).get("TF_USE_LEGACY_KERAS", "")).strip().lower() in ("1", "true")


def keras_imports(source_dir: str | None) -> dict[str, list[str]]:
    """Which Keras the trainer's code imports: ``{KERAS3 | TF_KERAS | LEGACY: ["trainer/task.py:3", ...]}``,
    read with ``ast`` from the ``.py`` files under ``source_dir`` (hidden folders, ``runs/`` and virtual
    environments skipped; at most a few hundred files). Empty when there is no folder to read."""
    found: dict[str, list[str]] = {}
    if not source_dir or not os.path.isdir(source_dir):
        return found
    files = 0
    for folder, dirs, names in os.walk(source_dir):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIP_DIRS)
        for name in sorted(n for n in names if n.endswith(".py")):
            files += 1
            if files > _MAX_FILES:
                return found
            path = os.path.join(folder, name)
            try:
                with open(path, encoding="utf-8") as f:
                    tree = ast.parse(f.read(), path)
            except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
                continue
            where = os.path.relpath(path, source_dir)
            for node in sorted((n for n in ast.walk(tree) if hasattr(n, "lineno")), key=lambda n: n.lineno):
                kind = _keras_kind(node)
                if kind and f"{where}:{node.lineno}" not in found.get(kind, []):
                    found.setdefault(kind, []).append(f"{where}:{node.lineno}")
    return found


def _keras_kind(node: ast.AST) -> str | None:
    if isinstance(node, ast.Import):
        for alias in node.names:
            top = alias.name.split(".")[0]
            if top == "keras":
                return KERAS3
            if top == "tf_keras":
                return LEGACY
            if alias.name.startswith("tensorflow.keras"):
                return TF_KERAS
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
        top = node.module.split(".")[0]
        if top == "keras":
            return KERAS3
        if top == "tf_keras":
            return LEGACY
        if node.module.startswith("tensorflow.keras") or (
                node.module == "tensorflow" and any(a.name == "keras" for a in node.names)):
            return TF_KERAS
    elif (isinstance(node, ast.Attribute) and node.attr == "keras" and isinstance(node.value, ast.Name)
          and node.value.id in ("tf", "tensorflow")):
        return TF_KERAS
    return None


def _first(where: list[str]) -> str:
    return where[0] + (f" and {len(where) - 1} more" if len(where) > 1 else "")


def multi_worker_fit_hint(source_dir: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """Keras 3's ``fit`` under MultiWorkerMirroredStrategy (keras-team/keras#20585): the way out that works for
    the code in ``source_dir`` run with ``env`` (the job's declared variables)."""
    head = ("this is Keras 3's Model.fit under a multi-worker strategy, which fails at its first step "
            "(keras-team/keras#20585); ")
    loop = f"or train with a custom loop (strategy.run); and save as the strategy needs: {SAVE_RULE}"
    imports = keras_imports(source_dir)
    declare = ('declare trainer.env: {TF_USE_LEGACY_KERAS: "1"} in the job file (set before TensorFlow is imported, '
               "in every replica here and on Vertex; your shell's is not passed on)")
    if imports.get(KERAS3):
        return (head + f"your code imports Keras 3 itself (import keras, at {_first(imports[KERAS3])}), which "
                "TF_USE_LEGACY_KERAS does not change (it switches only tf.keras): write `import tf_keras as keras` "
                "there (tf_keras, Keras 2, is in the trainer image; add tf_keras to your requirements for another "
                f"image){'' if legacy_keras_set(env) else ', or use from tensorflow import keras and ' + declare}, "
                + loop)
    if imports.get(TF_KERAS) and not legacy_keras_set(env):
        return (head + f"your code uses tf.keras (at {_first(imports[TF_KERAS])}): {declare}, and tf.keras is then "
                "tf_keras (Keras 2), which trains under the strategy; " + loop)
    return (head + "two ways out: train with tf_keras (Keras 2): `import tf_keras as keras`, or `from tensorflow "
            f"import keras` with TF_USE_LEGACY_KERAS=1 ({declare}); " + loop)


def no_model_hint(source_dir: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """How the trainer's Keras writes a SavedModel to ``AIP_MODEL_DIR``: Keras 3's ``model.save`` takes only a
    ``.keras`` file ("Invalid filepath extension"), its SavedModel is ``model.export``; tf_keras (Keras 2)
    saves one with ``model.save``."""
    imports = keras_imports(source_dir)
    legacy = bool(imports.get(LEGACY)) or (bool(imports.get(TF_KERAS)) and legacy_keras_set(env))
    keras3 = bool(imports.get(KERAS3)) or (bool(imports.get(TF_KERAS)) and not legacy_keras_set(env))
    export = ("model.export(os.environ['AIP_MODEL_DIR']) (its model.save takes only a .keras file); with more than "
              f"one replica, {SAVE_RULE}: model.export(model_dir())")
    save = ("model.save(os.environ['AIP_MODEL_DIR']); with more than one replica (under a multi-worker strategy every "
            f"worker must save), {SAVE_RULE}: model.save(model_dir())")
    if keras3 and not legacy:
        return f"the trainer must write a SavedModel to AIP_MODEL_DIR; your code uses Keras 3: {export}"
    if legacy and not keras3:
        return f"the trainer must write a SavedModel to AIP_MODEL_DIR; your code uses tf_keras (Keras 2): {save}"
    return (f"the trainer must write a SavedModel to AIP_MODEL_DIR: Keras 3: {export}; tf_keras (Keras 2, "
            f"TF_USE_LEGACY_KERAS=1): {save}; tf.Module: tf.saved_model.save(model, os.environ['AIP_MODEL_DIR'])")


def merge_checkpoints_hint(source_dir: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """Two replicas saved into one folder at once (:data:`MERGE_V2_CHECKPOINTS`): the save rule, in the call the
    trainer's Keras makes."""
    imports = keras_imports(source_dir)
    legacy = bool(imports.get(LEGACY)) or (bool(imports.get(TF_KERAS)) and legacy_keras_set(env))
    call = "model.save(model_dir())" if legacy or not (imports.get(KERAS3) or imports.get(TF_KERAS)) else \
        "model.export(model_dir())"
    return ("more than one replica saved into the same folder at once (under MultiWorkerMirroredStrategy every replica "
            "must save: the save is a collective), and one replica's temporary variable files were merged away under "
            f"the other's; {SAVE_RULE}: from trainers.outputs import model_dir, then {call}")


def argparse_flag(error: str | None, flags: Iterable[str] = ()) -> str | None:
    """The flag an argparse usage error names, when it is one of ``flags`` (``--learning_rate`` from
    ``task.py: error: unrecognized arguments: --learning_rate=0.04``), else None."""
    m = ARGPARSE_ERROR.match((error or "").strip())
    if not m:
        return None
    wanted = {f.split("=", 1)[0] for f in flags}
    unrecognized, invalid = UNRECOGNIZED.search(m.group(1)), INVALID_VALUE.search(m.group(1))
    named = ([a.split("=", 1)[0] for a in unrecognized.group(1).split()] if unrecognized else
             [invalid.group(1)] if invalid else [])
    return next((f for f in named if f in wanted), None)


def accepted_spelling(lines: Iterable[str], flag: str) -> str | None:
    """The spelling of ``flag`` argparse's usage line does accept (``--learning-rate`` for ``--learning_rate``)."""
    def key(f: str) -> str:
        return f.lstrip("-").replace("-", "_").lower()
    for line in lines:
        if "usage:" in line:
            for f in re.findall(r"--[\w-]+", line):
                if key(f) == key(flag) and f != flag:
                    return f
    return None


def hint_for(lines: Iterable[str], source_dir: str | None = None, env: Mapping[str, str] | None = None) -> str | None:
    """The hint for the first known failure found in ``lines``, else None; ``source_dir`` (the trainer's code)
    and ``env`` (the job's declared variables) make it say what works for that code."""
    text = "\n".join(line for line in lines if line)
    if MULTI_WORKER_FIT.search(text):
        return multi_worker_fit_hint(source_dir, env)
    if MERGE_V2_CHECKPOINTS.search(text):
        return merge_checkpoints_hint(source_dir, env)
    if NO_TF_KERAS.search(text):
        return ("TF_USE_LEGACY_KERAS=1 and `import tf_keras` need the tf_keras package: it is in the trainer image "
                "and the dev extra (pip install -e '.[cpu]'); add tf_keras to your requirements for another image")
    return None
