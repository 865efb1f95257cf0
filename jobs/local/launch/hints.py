"""Known failures of users' trainers, each recognised in a replica's output and explained in one line.

One place for "we have seen this before": the launcher adds the hint under a failed replica's error line, the
train step says the no-model line, a study names the flag its trainer refused. A hint says what works for the
code it sees: which Keras the trainer's source imports (:func:`keras_imports`, read with ``ast``, never run)
decides whether ``TF_USE_LEGACY_KERAS`` helps at all (it switches ``tf.keras`` only; ``import keras`` is Keras 3
whatever the variable says, FACTS.md) and how a model is written to ``AIP_MODEL_DIR``.
"""
from __future__ import annotations

import ast
import importlib.util
import os
import re
import sys
from typing import Iterable, Mapping

from jobs.rules import image_requirements

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


def hint_for(lines: Iterable[str], source_dir: str | None = None, env: Mapping[str, str] | None = None, *,
             requirements: str | None = None, runner: str = "process") -> str | None:
    """The hint for the first known failure found in ``lines``, else None; ``source_dir`` (the trainer's code)
    and ``env`` (the job's declared variables) make it say what works for that code; ``requirements`` (the
    trainer's requirements file) and ``runner`` (``process`` | ``docker``) where a missing package belongs."""
    given = list(lines)  # the replica's error line first (the outcome's order), then its last lines
    error = given[0] if given else ""
    text = "\n".join(line for line in given if line)
    if MULTI_WORKER_FIT.search(text):
        return multi_worker_fit_hint(source_dir, env)
    if MERGE_V2_CHECKPOINTS.search(text):
        return merge_checkpoints_hint(source_dir, env)
    if NO_TF_KERAS.search(text):
        return ("TF_USE_LEGACY_KERAS=1 and `import tf_keras` need the tf_keras package: it is in the trainer image "
                "and the dev extra (pip install -e '.[cpu]'); add tf_keras to your requirements for another image")
    api = keras2_api(text)
    if api:
        return keras2_api_hint(api, source_dir, env)
    asserted = gpu_assertion(error, given[1:])
    if asserted:
        return gpu_assertion_hint(asserted)
    module = image_requirements.module_name(error)
    if module:
        return missing_module_hint(module, source_dir, requirements, runner)
    return None


# -- Vertex samples written for Keras 2, for GPUs, for their image's packages (issue 55) ------------------------------
#: a Keras 2 API reached under Keras 3, as Keras 3 words it (``tf.keras`` shows as ``keras._tf_keras.keras``)
KERAS_ATTRIBUTE = re.compile(r"module '((?:keras|tensorflow\.keras)[\w.]*)' has no attribute '(\w+)'")
KERAS_MODULE = re.compile(r"No module named '((?:keras|tensorflow\.keras)\.[\w.]+)'")
KERAS_NAME = re.compile(r"cannot import name '(\w+)' from '((?:keras|tensorflow\.keras)[\w.]*)'")
KERAS_METHOD = re.compile(r"'(?:Sequential|Functional|Model)' object has no attribute '(\w+)'")
KERAS3_SAVE = re.compile(r"Invalid filepath extension for saving")
KERAS3_LEGACY_OPTIMIZER = re.compile(r"`keras\.optimizers\.legacy` is not supported in Keras 3")


def _keras_path(module: str) -> list[str]:
    """``keras._tf_keras.keras.layers`` / ``tensorflow.keras.layers`` -> ``["layers"]`` (below ``keras``)."""
    for prefix in ("keras._tf_keras.keras", "tensorflow.keras", "keras.api._v2.keras", "keras.api", "keras"):
        if module == prefix or module.startswith(prefix + "."):
            return [p for p in module[len(prefix):].split(".") if p]
    return module.split(".")


def in_tf_keras(parts: list[str]) -> bool:
    """Whether tf_keras (Keras 2) has ``keras.<parts>``: read from its generated API files
    (``tf_keras/api/_v2/keras/...``) without importing it (that would import TensorFlow)."""
    spec = importlib.util.find_spec("tf_keras")
    if spec is None or not spec.submodule_search_locations or not parts:
        return False
    folder = os.path.join(list(spec.submodule_search_locations)[0], "api", "_v2", "keras", *parts[:-1])
    if os.path.isdir(os.path.join(folder, parts[-1])):
        return True
    try:
        with open(os.path.join(folder, "__init__.py"), encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return False
    return any((alias.asname or alias.name) == parts[-1] for node in ast.walk(tree)
               if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names)


def _tf_keras_model_has(method: str) -> bool:
    spec = importlib.util.find_spec("tf_keras")
    if spec is None or not spec.submodule_search_locations:
        return False
    path = os.path.join(list(spec.submodule_search_locations)[0], "src", "engine", "training.py")
    try:
        with open(path, encoding="utf-8") as f:
            return f"    def {method}(" in f.read()
    except OSError:
        return False


def keras2_api(text: str) -> str | None:
    """The Keras 2 API a trainer reached under Keras 3 (``keras.callbacks.experimental``), when ``text`` shows one
    that tf_keras has and Keras 3 does not, else None (a typo is not one)."""
    if KERAS3_LEGACY_OPTIMIZER.search(text):
        return "keras.optimizers.legacy"
    if KERAS3_SAVE.search(text):
        return "model.save to a folder (a SavedModel)"
    for pattern in (KERAS_ATTRIBUTE, KERAS_MODULE, KERAS_NAME):
        m = pattern.search(text)
        if m:
            parts = (_keras_path(m.group(1)) + [m.group(2)] if pattern is KERAS_ATTRIBUTE else
                     _keras_path(m.group(2)) + [m.group(1)] if pattern is KERAS_NAME else _keras_path(m.group(1)))
            return "keras." + ".".join(parts) if in_tf_keras(parts) else None
    m = KERAS_METHOD.search(text)
    return f"Model.{m.group(1)}" if m and _tf_keras_model_has(m.group(1)) else None


def keras2_api_hint(api: str, source_dir: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """The way to run, unchanged, code written for Keras 2 that reached ``api`` under Keras 3: which way works
    depends on how the code imports Keras (:func:`keras_imports`) and on ``TF_USE_LEGACY_KERAS`` in ``env``."""
    head = (f"{api} is Keras 2's (tf_keras, which the trainer image holds) and Keras 3 has no such thing; Keras 3 is "
            "what `import keras` gives, and tf.keras unless TF_USE_LEGACY_KERAS=1, here and in the image; ")
    declare = ('declare trainer.env: {TF_USE_LEGACY_KERAS: "1"} in the job file (set in every replica before '
               "TensorFlow is imported, here and on Vertex)")
    imports = keras_imports(source_dir)
    if imports.get(KERAS3):
        return (head + f"your code imports Keras 3 itself (import keras, at {_first(imports[KERAS3])}), which the "
                "variable does not change: write `import tf_keras as keras` there")
    if imports.get(TF_KERAS) and not legacy_keras_set(env):
        return (head + f"your code uses tf.keras (at {_first(imports[TF_KERAS])}): {declare}, and tf.keras is then "
                "tf_keras: the code runs unchanged")
    return (head + f"code that uses tf.keras runs unchanged once you {declare}; code that imports keras needs "
            "`import tf_keras as keras`")


#: ``assert len(gpus) == args.num_gpus``: a line of the traceback that asserts something about GPUs
GPU_WORDS = re.compile(r"gpu", re.IGNORECASE)


def gpu_assertion(error: str, lines: list[str]) -> str | None:
    """The assertion about GPUs that failed (its source line in the traceback among ``lines``, or the ``error``
    line's message), else None."""
    if not error.startswith("AssertionError"):
        return None
    if GPU_WORDS.search(error):
        return error
    asserts = [line.strip() for line in lines if line.strip().startswith("assert ")]
    return next((a for a in reversed(asserts) if GPU_WORDS.search(a)), None)


def gpu_assertion_hint(asserted: str) -> str:
    """A trainer that checks its GPUs (``--num-gpus 4`` for a pool of 4 GPUs) sees none in a local replica."""
    return (f"the trainer checks its GPUs ({asserted}), and a replica here sees only this machine's GPUs, none without "
            "one (the local launcher runs a GPU pool over this machine's CPUs; on Vertex the pool's GPUs are there): "
            "to run the script here unchanged, give it the count a replica sees here in a local copy of the job's "
            "arguments (--set 'trainer.args=[...]'), or let it count them, "
            "len(tf.config.list_physical_devices('GPU')), rather than assert them")


def missing_module_hint(module: str, source_dir: str | None = None, requirements: str | None = None,
                        runner: str = "process") -> str | None:
    """Where the package a replica could not import must be installed, for the runner in use: the process runner
    runs every replica in this environment, the docker runner in the job's image; None for a module of the
    trainer's own code or a submodule of a package that is here (another failure)."""
    top = module.split(".")[0]
    if source_dir and (os.path.exists(os.path.join(source_dir, top)) or
                       os.path.exists(os.path.join(source_dir, top + ".py"))):
        return None
    if runner != "docker" and importlib.util.find_spec(top) is not None:
        return None
    pin = image_requirements.listed(requirements, module) if requirements else None
    if runner == "docker":
        if pin is not None:
            return (f"trainer.requirements lists it (line {pin.line}: {pin.text}), but the image the replicas ran "
                    "was built without it: rebuild it (vtp build --config JOB --image REPO) and run with the new "
                    "image (--image)")
        return (f"the image lacks {top}: add the package that provides it to trainer.requirements and rebuild the "
                "image (vtp build --config JOB --image REPO); without it the job fails on Vertex too")
    here = f"this environment ({sys.executable})"
    if pin is not None:
        return (f"trainer.requirements lists it (line {pin.line}: {pin.text}), which vtp build installs in your image; "
                f"the process runner (the default) runs every replica in {here}: install it here "
                f"(python -m pip install '{pin.text}'), or run every replica in your image: vtp build --config JOB "
                "--image REPO, then --runner docker --image REPO")
    listed = f"trainer.requirements ({requirements})" if requirements else "trainer.requirements (the job has none)"
    return (f"neither {here}, where the process runner runs every replica, nor {listed} has {top}: add the "
            f"package that provides it to trainer.requirements (vtp build installs it in your image; without it the "
            "job fails on Vertex too) and install it here (python -m pip install PACKAGE)")
