"""Verify an exported SavedModel, whoever made it: load it, run its serving signature, time it.

:func:`verify` loads the SavedModel the trainer wrote to ``<model_dir>`` (``AIP_MODEL_DIR``; in it or one folder
below it, as ``jobs.rules.saved_model`` finds it: the record's ``model_dir`` is that folder) in *this* process and
runs its ``serving_default`` signature on

* the instances of a sample request (``serving.sample_request``'s JSON, ``{"instances": [...]}``, the body Vertex online prediction
  takes: an instance is the value of the signature's one input, or an object naming every input; bytes
  as ``{"b64": "..."}``), or
* without one, an input generated from the signature's specs (a batch of 2; numbers from a seeded normal
  distribution; strings as a small PNG image, what an image model's bytes input decodes),

and times it (first call, then the median of 5). With ``serving.eval_data`` (held-out examples with their
labels) it also evaluates the model on them, whoever made it (``jobs.evaluation.examples_file``: RMSE and MAE against the
labels' mean, or accuracy, per-class precision and recall against the most common class). For the built-in classifier (its ``metadata.json`` names
the classes) with its prepared data, it also evaluates the held-out split through ``serving_pixels``
(accuracy, loss, confusion matrix, a gallery): ``trainers.export.evaluate_export``.

"Fresh process": the caller is the pipeline's verify step, a task process of its own that has never
trained, so loading here proves the export stands alone (no second process is started for it). That process
imports only the parts of TensorFlow it uses, and no Keras (``jobs.steps.tensorflow_import``): loading a
SavedModel and calling its signatures needs none of the rest; a model that does not load so is loaded again
after the rest is imported (:func:`load`).

Every problem is a :class:`VerifyError` whose text is one line naming what to fix: no SavedModel, no
serving signature (naming the ones there are), a sample that does not fit (naming the signature's inputs).
"""
from __future__ import annotations

import base64
import json
import os
import statistics
import time
from typing import Any

from jobs.evaluation import examples_file
from jobs.rules import saved_model
from jobs.evaluation.verdict import judge
from jobs.local.launch.hints import no_model_hint
from jobs.steps.tensorflow_import import complete, import_tensorflow
from trainers.export import evaluate_export

SIGNATURE = "serving_default"
GENERATED_BATCH = 2


class VerifyError(Exception):
    """The model cannot be verified; ``str(exc)`` is one line."""


def parse_request(text: str) -> list[Any]:
    """The ``instances`` of a sample request (JSON text; checked by validation already, checked again here
    since a KFP user may call the step directly)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise VerifyError(f"serving.sample_request: not valid JSON ({exc}); valid choices: "
                          '{"instances": [[0.1, 0.2]]}') from None
    instances = doc.get("instances") if isinstance(doc, dict) else None
    if not isinstance(instances, list) or not instances:
        raise VerifyError('serving.sample_request: must be an object with a non-empty "instances" list; '
                          'valid choices: {"instances": [[0.1, 0.2]]}')
    return instances


def _spec_text(spec) -> str:
    dims = "?" if spec.shape.rank is None else ", ".join("None" if d is None else str(d) for d in spec.shape.as_list())
    return f"{spec.dtype.name} [{dims}]"


def describe_specs(specs: dict[str, Any]) -> dict[str, str]:
    return {name: _spec_text(spec) for name, spec in sorted(specs.items())}


def _inputs_text(specs: dict[str, Any]) -> str:
    return ", ".join(f"{name}: {text}" for name, text in describe_specs(specs).items())


def _decode(value: Any) -> Any:
    """``{"b64": "..."}`` -> bytes, recursively (Vertex's JSON form for binary values)."""
    if isinstance(value, dict) and set(value) == {"b64"}:
        return base64.b64decode(value["b64"])
    if isinstance(value, dict):
        return {k: _decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def _tensor(name: str, values: list[Any], spec, specs: dict[str, Any], field: str = "serving.sample_request"):
    import numpy as np
    import tensorflow as tf

    try:
        if spec.dtype == tf.string:
            array = np.asarray([v.encode() if isinstance(v, str) else v for v in values], dtype=object)
        else:
            array = np.asarray(values, dtype=spec.dtype.as_numpy_dtype)
        tensor = tf.constant(array, dtype=spec.dtype)
    except (ValueError, TypeError, OverflowError) as exc:
        raise VerifyError(f"{field}: input {name!r} does not fit the signature {SIGNATURE} "
                          f"({' '.join(str(exc).split())[:150]}); its inputs are {_inputs_text(specs)}") from None
    if not spec.shape.is_compatible_with(tensor.shape):
        raise VerifyError(f"{field}: input {name!r} has shape {tensor.shape.as_list()}, the signature "
                          f"{SIGNATURE} takes {_inputs_text(specs)}")
    return tensor


def inputs_from_instances(instances: list[Any], specs: dict[str, Any], field: str = "serving.sample_request",
                          lines: list[int] | None = None) -> dict[str, Any]:
    """The signature's keyword tensors from Vertex-style ``instances`` (one value per instance for a
    one-input signature, or an object per instance naming every input). ``field``: the setting the instances
    came from, named in an error; ``lines``: the instances' line numbers in a file (an error names the line,
    not the index)."""
    names = sorted(specs)
    columns: dict[str, list[Any]] = {n: [] for n in names}
    for i, instance in enumerate(instances):
        where = f"instance {i}" if lines is None else f"the instance of line {lines[i]}"
        instance = _decode(instance)
        if isinstance(instance, dict):
            missing, extra = set(names) - set(instance), set(instance) - set(names)
            if missing or extra:
                raise VerifyError(f"{field}: {where} names {sorted(instance)}, the signature "
                                  f"{SIGNATURE} takes {_inputs_text(specs)}")
            for n in names:
                columns[n].append(instance[n])
        elif len(names) == 1:
            columns[names[0]].append(instance)
        else:
            raise VerifyError(f"{field}: {where} is not an object, but the signature {SIGNATURE} "
                              f"takes several inputs ({_inputs_text(specs)}): give each instance as "
                              "{\"" + names[0] + "\": ..., ...}")
    return {n: _tensor(n, columns[n], specs[n], specs, field) for n in names}


def _tiny_png() -> bytes:
    import tensorflow as tf

    return tf.io.encode_png(tf.fill([8, 8, 3], tf.constant(128, tf.uint8))).numpy()


def generated_inputs(specs: dict[str, Any], batch: int = GENERATED_BATCH) -> dict[str, Any]:
    """An input for every spec: unknown batch dimension -> ``batch``, other unknown dimensions -> 1."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    out = {}
    for name, spec in sorted(specs.items()):
        if spec.shape.rank is None:
            shape = [batch]
        else:
            shape = [(batch if i == 0 else 1) if d is None else d for i, d in enumerate(spec.shape.as_list())]
        if spec.dtype == tf.string:
            out[name] = tf.constant(np.full(shape, _tiny_png(), dtype=object), dtype=tf.string)
        elif spec.dtype.is_floating:
            out[name] = tf.constant(rng.normal(size=shape).astype(spec.dtype.as_numpy_dtype))
        elif spec.dtype == tf.bool:
            out[name] = tf.zeros(shape, tf.bool)
        else:
            out[name] = tf.zeros(shape, spec.dtype)
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, float):
        return round(value, 6)
    return value


def _predictions(outputs: dict[str, Any], count: int) -> list[dict[str, Any]]:
    """One object per instance: ``{output name: value}`` (an output without a batch dimension repeats)."""
    import numpy as np

    arrays = {k: np.asarray(v.numpy()) for k, v in outputs.items()}
    rows = []
    for i in range(count):
        row = {}
        for k, a in sorted(arrays.items()):
            row[k] = _plain(np.asarray(a[i] if a.ndim and a.shape[0] == count else a).tolist())
        rows.append(row)
    return rows


def find(model_dir: str) -> saved_model.FoundModel:
    """The SavedModel folder under ``model_dir`` (``AIP_MODEL_DIR`` or one folder below it: THE rule,
    ``jobs.rules.saved_model``); none, or several it cannot choose between, is one line."""
    try:
        return saved_model.find_saved_model(model_dir)
    except saved_model.NoSavedModel as exc:
        raise VerifyError(f"model: {exc}: {no_model_hint()}") from None


def load(model_dir: str):
    """``tf.saved_model.load`` of the SavedModel :func:`find` finds under ``model_dir``, with the two commonest
    mistakes said in one line each. A load that fails while part of TensorFlow is not imported yet is tried again
    with all of it (``jobs.steps.tensorflow_import``)."""
    tf = import_tensorflow()

    model_dir = find(model_dir).path
    try:
        try:
            return tf.saved_model.load(model_dir)
        except Exception:
            if not complete(tf):
                raise
            return tf.saved_model.load(model_dir)
    except Exception as exc:  # a corrupt or incompatible export
        raise VerifyError(f"model: {model_dir} is not a loadable SavedModel: {type(exc).__name__}: "
                          f"{' '.join(str(exc).split())[:200]}") from None


def serving_signature(model_dir: str):
    """(the loaded SavedModel, its ``serving_default``): what Vertex online prediction calls; a model without it
    is one line."""
    loaded = load(model_dir)
    signatures = dict(loaded.signatures)
    if SIGNATURE not in signatures:
        there = ", ".join(sorted(signatures)) or "none"
        raise VerifyError(f"model: {model_dir} has no {SIGNATURE} signature (it has: {there}); Vertex online "
                          f"prediction calls {SIGNATURE}: save the model with one (Keras model.save / model.export do)")
    return loaded, signatures[SIGNATURE]


def read_eval_examples(eval_data: str, sample_request: str = "") -> list[dict[str, Any]]:
    """``serving.eval_data``'s examples (``jobs.evaluation.examples_file.read_examples``), each instance shaped like the sample
    request's first when one is given; a bad file is one line."""
    sample = parse_request(sample_request)[0] if sample_request else None
    try:
        return examples_file.read_examples(eval_data, sample)
    except examples_file.EvalError as exc:
        raise VerifyError(str(exc)) from None


def verify(model_dir: str, sample_request: str = "", data_dir: str = "", timed_runs: int = 5, *,
           eval_data: str = "", eval_task: str = "auto", eval_output: str = "") -> dict[str, Any]:
    """Load, run, time (see the module docstring); returns the verification record. ``sample_request``:
    the JSON text ``{"instances": [...]}`` (empty: generated input). ``eval_data``: a ``serving.eval_data``
    file (JSON Lines of ``{"instance", "label"}``): the model is evaluated on it with the signature loaded here
    (``jobs.evaluation.examples_file``), the figures under ``eval`` in the record."""
    tf = import_tensorflow()

    examples = read_eval_examples(eval_data, sample_request) if eval_data else None  # a bad file: before the model
    found = find(model_dir)
    model_dir = found.path
    loaded, fn = serving_signature(model_dir)
    signatures = dict(loaded.signatures)
    specs = {k: v for k, v in fn.structured_input_signature[1].items()}
    if sample_request:
        instances = parse_request(sample_request)
        inputs, source = inputs_from_instances(instances, specs), "serving.sample_request"
    else:
        inputs, source = generated_inputs(specs), "generated from the signature"
    count = int(next(iter(inputs.values())).shape[0]) if inputs else 1
    started = time.perf_counter()
    try:
        outputs = fn(**inputs)
    except (tf.errors.OpError, ValueError, TypeError) as exc:
        hint = "" if sample_request else "; give serving.sample_request with real instances"
        raise VerifyError(f"model: {SIGNATURE} failed on the {source} input ({type(exc).__name__}: "
                          f"{' '.join(str(exc).split())[:200]}); its inputs are {_inputs_text(specs)}{hint}") from None
    first_ms = (time.perf_counter() - started) * 1000
    times = []
    for _ in range(timed_runs):
        started = time.perf_counter()
        fn(**inputs)
        times.append((time.perf_counter() - started) * 1000)
    record: dict[str, Any] = {
        "model_dir": model_dir, "signature": SIGNATURE, "signatures": sorted(signatures),
        "inputs": describe_specs(specs),
        "outputs": {k: _spec_text(v) for k, v in sorted(fn.structured_outputs.items())},
        "input_source": source, "instances": count, "predictions": _predictions(outputs, count),
        # the model's size, whoever trained it: the values of the variables the serving signature reads
        "parameters": int(sum(v.shape.num_elements() or 0 for v in fn.variables)),
        "latency_ms": {"first_call": round(first_ms, 3), "median": round(statistics.median(times), 3),
                       "runs": timed_runs, "batch": count},
        "framework": "tensorflow", "framework_version": tf.__version__,
    }
    if found.below:  # one folder below AIP_MODEL_DIR: the folder verified (and registered), and why
        record["aip_model_dir"], record["model_found"] = found.model_dir, found.line
    if examples is not None:
        record["eval"] = evaluate_examples(fn, specs, examples, task=eval_task, output=eval_output,
                                           model_dir=model_dir, source=eval_data)
    metadata = _builtin_metadata(model_dir)
    if metadata:
        record["metadata"] = metadata
        if data_dir:
            held_out = evaluate_export(model_dir, data_dir, loaded=loaded)
            held_out.pop("metadata", None)
            record.update(held_out)
    return record


def evaluate_examples(fn, specs: dict[str, Any], examples: list[dict[str, Any]], *, task: str = "auto",
                      output: str = "", model_dir: str = "", source: str = "") -> dict[str, Any]:
    """The loaded signature ``fn`` (input ``specs``) run on ``serving.eval_data``'s examples (as
    ``jobs.evaluation.examples_file.read_examples`` returns them), in batches, and judged (``jobs.evaluation.verdict.judge``).
    Raises :class:`VerifyError` (one line)."""
    import numpy as np

    field = examples_file.FIELD
    collected: dict[str, list[Any]] = {}
    for start in range(0, len(examples), examples_file.BATCH):
        chunk = examples[start:start + examples_file.BATCH]
        inputs = inputs_from_instances([e["instance"] for e in chunk], specs, field=field,
                                       lines=[e.get("line", start + i + 1) for i, e in enumerate(chunk)])
        try:
            outputs = fn(**inputs)
        except Exception as exc:  # the model failed on these inputs (an OpError, a shape error)
            raise VerifyError(f"{field}: {SIGNATURE} failed on the examples from line {chunk[0].get('line')} "
                              f"({type(exc).__name__}: {' '.join(str(exc).split())[:200]}); its inputs are "
                              f"{_inputs_text(specs)}") from None
        for k, v in outputs.items():
            value = np.asarray(v.numpy())
            if value.ndim == 0 or value.shape[0] != len(chunk):  # no batch dimension: the same for every instance
                value = np.repeat(value.reshape(1, *value.shape), len(chunk), axis=0)
            collected.setdefault(k, []).append(value)
    arrays = {k: np.concatenate(v, axis=0) for k, v in collected.items()}
    classes = [str(c) for c in (_builtin_metadata(model_dir) or {}).get("classes") or []] if model_dir else []
    try:
        result = judge(arrays, [e["label"] for e in examples], task=task, output=output, classes=classes)
    except examples_file.EvalError as exc:
        raise VerifyError(str(exc)) from None
    return {"data": source, **result}


def evaluate_model(model_dir: str, eval_data: str, task: str = "auto", output: str = "",
                   sample_request: str = "") -> dict[str, Any]:
    """THE verdict of an exported model folder on a ``serving.eval_data`` file, for any step that needs one (the
    verify step; a step comparing two models on the same held-out examples): load ``model_dir`` (a SavedModel,
    local, ``/gcs`` or ``gs://``) in this process, run its ``serving_default`` on every example, return the
    figures (``{"task": "regression", "examples", "rmse", "mae", "baseline_rmse", "r2", ...}`` or
    ``{"task": "classification", "examples", "accuracy", "baseline_accuracy", "per_class", ...}``: see
    ``jobs.evaluation.examples_file``). ``sample_request``: its JSON text, whose first instance gives the shape every
    instance must have. Raises :class:`VerifyError` (one line) for the file, the model or the fit."""
    examples = read_eval_examples(eval_data, sample_request)
    _, fn = serving_signature(model_dir)
    return evaluate_examples(fn, dict(fn.structured_input_signature[1]), examples, task=task, output=output,
                             model_dir=model_dir, source=eval_data)


def _builtin_metadata(model_dir: str) -> dict[str, Any] | None:
    """The built-in trainer's ``metadata.json`` (classes, image size, ...), None for any other model."""
    import tensorflow as tf

    path = f"{model_dir.rstrip('/')}/metadata.json"
    try:
        with tf.io.gfile.GFile(path) as f:
            meta = json.load(f)
    except (tf.errors.OpError, OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) and meta.get("classes") else None


def is_classifier(record: dict[str, Any]) -> bool:
    return bool(record.get("classes")) and bool(record.get("confusion_matrix"))


def record_path(record_dir: str) -> str:
    return os.path.join(record_dir, "verification.json") if "://" not in record_dir else f"{record_dir}/verification.json"
