"""Where a job's model is under ``AIP_MODEL_DIR``: THE rule. The train step's missing-model check
(``jobs.steps.calls``), every trial and the baseline of a local study (``jobs.tuning.trial``), the baseline of a Vertex
study (``jobs.tuning.pick``), the verify step's loader (``jobs.steps.verify``) and the Model Registry request's
``artifactUri`` (``jobs.cloud.apis.vertex.model_artifact_uri``) all ask :func:`find_saved_model`.

Vertex ends a CustomJob SUCCEEDED whatever its chief wrote, and the Model Registry takes "the directory holding
saved_model.pb" as a model's artifact location, wherever that directory is. Google's samples save in three ways,
and all three are found:

* in ``AIP_MODEL_DIR`` itself (``model.save(os.environ["AIP_MODEL_DIR"])``): that folder;
* one folder below it, as TensorFlow Serving lays out a model's versions (``model.save(os.path.join(AIP_MODEL_DIR,
  "1"))``), as an exporter names its exports by timestamp (``export_saved_model(AIP_MODEL_DIR)`` writes
  ``model/1700000000``), or in a named folder (``model/savedmodel``): the one subfolder holding a SavedModel; of
  several, when every one is named by a number (versions, timestamps), the highest, which is the newest and the one
  TensorFlow Serving serves.

Anything else is one line listing what the folder holds (:class:`NoSavedModel`): none found (and where a
SavedModel two folders down is, if there is one), or several named folders, which no rule can choose between.
A SavedModel is a folder holding ``saved_model.pb`` (or ``saved_model.pbtxt``).

Local paths and Vertex's ``/gcs`` mount are listed with Python's own functions (a step that does not import
TensorFlow stays so); ``gs://`` elsewhere through ``tf.io.gfile`` (``trainers.fileio``), unless the caller says not to
(``remote=False``: the folder is then taken as given, unchecked).
"""
from __future__ import annotations

import dataclasses
import os

from trainers import fileio
from jobfile.paths import join, readable

SAVED_MODEL_FILES = ("saved_model.pb", "saved_model.pbtxt")
#: names shown in a listing, at most
_SHOWN = 8


class NoSavedModel(ValueError):
    """No model where the rule looks, or several it cannot choose between; ``str(exc)`` is one line, listing what the
    folder holds."""


@dataclasses.dataclass(frozen=True)
class FoundModel:
    """The model of a job: ``path`` (the SavedModel folder: verified, registered as ``artifactUri``), found under
    ``model_dir`` (``AIP_MODEL_DIR``); ``below``: the subfolder's name when it is one folder down (``""``: in
    ``model_dir`` itself); ``others``: the other SavedModel folders passed over (older versions)."""

    path: str
    model_dir: str
    below: str = ""
    others: tuple[str, ...] = ()
    checked: bool = True

    @property
    def line(self) -> str:
        """One line saying where the model was found, when it is not in ``AIP_MODEL_DIR`` itself (else ``""``)."""
        if not self.below:
            return ""
        older = (f"; passed over: {', '.join(self.others)} (older)" if self.others else "")
        return (f"note: the model is the SavedModel in {self.path}, one folder below AIP_MODEL_DIR "
                f"({_kind(self.below)}), as Vertex takes it: that folder is verified and registered{older}")


def _kind(name: str) -> str:
    if name.isdigit():
        return f"timestamp {name}" if len(name) >= 9 else f"version {name}, TensorFlow Serving's layout"
    return f"the folder {name!r}"


class _Lister:
    """Listing a folder: local paths and the ``/gcs`` mount with ``os``, ``gs://`` through ``trainers.fileio``."""

    def __init__(self, root: str):
        self.local = readable(root)
        self.plain = fileio.plain_path(self.local) is not None

    def path(self, *parts: str) -> str:
        return os.path.join(self.local, *parts) if self.plain else join(self.local, *parts)

    def names(self, *parts: str) -> list[str]:
        try:
            return fileio.listdir(self.path(*parts))
        except (OSError, ValueError):
            return []
        except Exception as exc:  # gs://: tf.errors.NotFoundError, named, not imported (TensorFlow stays lazy here)
            if type(exc).__name__ in ("NotFoundError", "PermissionDeniedError"):
                return []
            raise

    def isdir(self, *parts: str) -> bool:
        return fileio.isdir(self.path(*parts))

    def holds_saved_model(self, *parts: str) -> bool:
        return any(fileio.exists(self.path(*parts, name)) for name in SAVED_MODEL_FILES)


def find_saved_model(model_dir: str, *, remote: bool = True) -> FoundModel:
    """The model under ``model_dir`` (see the module doc). Raises :class:`NoSavedModel` (one line) when there is
    none, or several the rule cannot choose between. ``remote=False``: a ``gs://`` folder this machine cannot read
    without TensorFlow (no ``/gcs`` mount) is returned as given, ``checked=False``."""
    root = str(model_dir).rstrip("/") or str(model_dir)
    lister = _Lister(root)
    if not lister.plain and not remote:
        return FoundModel(root, root, checked=False)
    if lister.holds_saved_model():
        return FoundModel(root, root)
    names = lister.names()
    folders = [n for n in names if lister.isdir(n)]
    models = [n for n in folders if lister.holds_saved_model(n)]
    if len(models) == 1:
        return FoundModel(join(root, models[0]), root, models[0])
    if models and all(n.isdigit() for n in models):
        newest = max(models, key=int)
        others = tuple(sorted((n for n in models if n != newest), key=int, reverse=True))
        return FoundModel(join(root, newest), root, newest, others)
    if models:
        raise NoSavedModel(f"{root} holds SavedModels in {len(models)} folders ({', '.join(f'{n}/' for n in models)}), "
                           "and only folders named by numbers (versions, timestamps) say which is newest: write one "
                           "model to AIP_MODEL_DIR, or each one to a numbered folder under it")
    raise NoSavedModel(f"{root} holds no SavedModel (no {SAVED_MODEL_FILES[0]} in it or in a folder one level "
                       f"below){_listing(lister, names, folders)}")


def _listing(lister: _Lister, names: list[str], folders: list[str]) -> str:
    """``; it holds: a.keras, ckpt/ ...`` and, when there is one, the SavedModel two folders down."""
    if not lister.isdir():
        return "; the folder does not exist"
    if not names:
        return "; the folder is empty"
    shown = [f"{n}/" if n in folders else n for n in names[:_SHOWN]]
    more = f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else ""
    deeper = next((f"{a}/{b}" for a in folders[:_SHOWN] for b in lister.names(a)
                   if lister.isdir(a, b) and lister.holds_saved_model(a, b)), "")
    where = (f"; a SavedModel two folders down, in {deeper}/, is deeper than a model is looked for: save it "
             f"to AIP_MODEL_DIR or one folder below" if deeper else "")
    return f"; it holds: {', '.join(shown)}{more}{where}"


def artifact_location(model_dir: str) -> str:
    """The folder the Model Registry gets as ``artifactUri``: :func:`find_saved_model`'s, where this machine reads
    ``model_dir`` without TensorFlow (a local folder, Vertex's ``/gcs`` mount); else ``model_dir`` as given (the
    verify step, which runs before the upload, resolved it); also as given when no model is found there (the upload
    reports what the service says)."""
    if not str(model_dir).strip():
        return str(model_dir)
    try:
        return find_saved_model(model_dir, remote=False).path
    except NoSavedModel:
        return str(model_dir).rstrip("/")


def same_or_below(folder: str, model_dir: str) -> bool:
    """``folder`` is ``model_dir`` or a folder one level below it (a run's model, found by :func:`find_saved_model`
    under its ``AIP_MODEL_DIR``); ``gs://`` and its ``/gcs`` mount alike."""
    a, b = readable(str(folder)).rstrip("/"), readable(str(model_dir)).rstrip("/")
    if not a or not b:
        return False
    return a == b or a.rsplit("/", 1)[0] == b
