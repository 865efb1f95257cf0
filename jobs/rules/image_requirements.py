"""``trainer.requirements`` read against the image they are installed in, before anything is built or run.

``vtp build`` installs a user's requirements over the trainer image (``jobs.images.user``), which already holds
Python 3.11, TensorFlow (2.21; ``tensorflow-tpu`` 2.20 in the tpu variant), Keras 3 and tf_keras. Two kinds of pin
fail there, and neither showed until now (a local run uses this environment's TensorFlow whatever the file says):

* a pin with no build for the image's Python: ``tensorflow==2.8.0`` (TensorFlow 2.8 has wheels for Python
  3.7-3.10) fails ``pip install`` in the build;
* a pin that would replace what the image holds: ``tensorflow==2.12.1`` installs and puts TensorFlow 2.12 over
  2.21 (tf_keras and Keras 3 then no longer match it), ``tf_keras==2.15.0`` pulls TensorFlow 2.15 with it
  (tf_keras 2.X requires tensorflow 2.X), ``keras<3`` replaces the Keras 3 that TensorFlow 2.21 requires, and another
  TensorFlow distribution (``tensorflow-cpu``, ``tf-nightly``) writes a second ``tensorflow`` package over the image's.

Each is one ``error:`` line naming the pin and the image's version (:func:`image_pin_problems`). What the image
holds is :data:`IMAGE_PYTHON` and :data:`IMAGE_TENSORFLOW` (a test holds them to ``containers/Dockerfile`` and
``pyproject.toml``, which the image is built from: the image itself has no pyproject to read). Which Python versions
each TensorFlow release has wheels for is :data:`TENSORFLOW_PYTHON`, TensorFlow's own table (:data:`SOURCE`): data
held here, never asked of the network. A release the table does not know is said so, never guessed.

The requirement lines are read with ``packaging`` (pip's own parser of requirement specifiers, markers evaluated
for the image's Python on Linux); option lines, URLs and local paths are left to ``jobs.images.user``'s checks.
:func:`listed` says whether a module a replica could not import is one the requirements install (the launcher's
hint: ``jobs.local.launch.hints``).
"""
from __future__ import annotations

import dataclasses
import re

from packaging.markers import InvalidMarker, UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from jobfile.errors import Problem, problem
from jobfile.regular_file import NotARegularFile, read_regular

#: the trainer image's Python (containers/Dockerfile: ``BASE_IMAGE=python:3.11-slim``)
IMAGE_PYTHON = "3.11"
#: per image variant: (the TensorFlow distribution it holds, its release series); pyproject.toml's extras
IMAGE_TENSORFLOW = {"cpu": ("tensorflow", "2.21"), "gpu": ("tensorflow", "2.21"), "tpu": ("tensorflow-tpu", "2.20")}
#: TensorFlow's supported Python versions per release: (first, last) 3.x minor, from its "Tested build
#: configurations" table for Linux CPU (:data:`SOURCE`); 1.x and 2.0-2.1 also had Python 2.7, irrelevant here.
TENSORFLOW_PYTHON = {
    "2.21": ("3.10", "3.13"), "2.20": ("3.9", "3.13"), "2.19": ("3.9", "3.12"), "2.18": ("3.9", "3.12"),
    "2.17": ("3.9", "3.12"), "2.16": ("3.9", "3.12"), "2.15": ("3.9", "3.11"), "2.14": ("3.9", "3.11"),
    "2.13": ("3.8", "3.11"), "2.12": ("3.8", "3.11"), "2.11": ("3.7", "3.10"), "2.10": ("3.7", "3.10"),
    "2.9": ("3.7", "3.10"), "2.8": ("3.7", "3.10"), "2.7": ("3.7", "3.9"), "2.6": ("3.6", "3.9"), "2.5": ("3.6", "3.9"),
    "2.4": ("3.6", "3.8"), "2.3": ("3.5", "3.8"), "2.2": ("3.5", "3.8"), "2.1": ("3.5", "3.7"), "2.0": ("3.3", "3.7"),
    "1.15": ("3.3", "3.7"), "1.14": ("3.3", "3.7"), "1.13": ("3.3", "3.7"), "1.12": ("3.3", "3.6"),
    "1.11": ("3.3", "3.6"), "1.10": ("3.3", "3.6"), "1.9": ("3.3", "3.6"), "1.8": ("3.3", "3.6"), "1.7": ("3.3", "3.6"),
    "1.6": ("3.3", "3.6"), "1.5": ("3.3", "3.6"), "1.4": ("3.3", "3.6"), "1.3": ("3.3", "3.6"), "1.2": ("3.3", "3.6"),
    "1.1": ("3.3", "3.6"), "1.0": ("3.3", "3.6"),
}
SOURCE = ("https://www.tensorflow.org/install/source#tested_build_configurations (tensorflow/docs "
          "site/en/install/source.md at 7c365021, 2026-03-11; read 2026-11-29)")
#: distributions that install the ``tensorflow`` package (a second one overwrites the image's)
TENSORFLOW_DISTRIBUTIONS = frozenset({"tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-intel",
                                      "tensorflow-tpu", "tensorflow-macos", "tensorflow-aarch64", "intel-tensorflow",
                                      "tf-nightly", "tf-nightly-cpu", "tf-nightly-gpu"})
#: patch releases tried when asking whether a specifier admits a release series (2.21.0 ... 2.21.39)
_PATCHES = range(40)


@dataclasses.dataclass(frozen=True)
class Pin:
    """One requirement line: its number, its text, the distribution (canonical name) and its specifier."""

    line: int
    text: str
    name: str
    specifier: SpecifierSet


def read_pins(text: str) -> list[Pin]:
    """The requirement lines of a requirements file's ``text`` that install for the image's Python on Linux (their
    markers evaluated so); options, URLs, local paths and lines that are no requirement are skipped."""
    pins = []
    environment = {"python_version": IMAGE_PYTHON, "python_full_version": f"{IMAGE_PYTHON}.0",
                   "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
                   "implementation_name": "cpython", "platform_python_implementation": "CPython"}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith(("#", "-", ".", "/")) or "://" in line:
            continue
        try:
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate(environment):
                continue
        except (InvalidRequirement, InvalidMarker, UndefinedEnvironmentName):
            continue
        pins.append(Pin(number, line, canonicalize_name(req.name), req.specifier))
    return pins


def admits(specifier: SpecifierSet, series: str) -> bool:
    """Whether some release of ``series`` (``2.21``: 2.21.0, 2.21.1, ...) satisfies ``specifier``."""
    return any(specifier.contains(f"{series}.{p}") for p in _PATCHES)


def _python_range(series: str) -> str:
    first, last = TENSORFLOW_PYTHON[series]
    return f"{first}-{last}"


def _has_build(series: str) -> bool:
    first, last = TENSORFLOW_PYTHON[series]
    key = tuple(int(x) for x in IMAGE_PYTHON.split("."))
    return tuple(int(x) for x in first.split(".")) <= key <= tuple(int(x) for x in last.split("."))


def _tensorflow_problem(pin: Pin, field: str, variant: str) -> Problem | None:
    image_dist, image_series = IMAGE_TENSORFLOW[variant]
    image = f"{image_dist} {image_series}"
    valid = [f"remove the line (the image's {image} is used)", f"{image_dist}=={image_series}.*"]
    second = pin.name != image_dist
    if not second and admits(pin.specifier, image_series):
        return None
    wanted = [s for s in TENSORFLOW_PYTHON if admits(pin.specifier, s)] if pin.specifier else []
    where = f"line {pin.line} ({pin.text})"
    if wanted and not any(_has_build(s) for s in wanted):
        shown = ", ".join(f"TensorFlow {s}: Python {_python_range(s)}" for s in wanted[:3])
        return problem(field, f"{where} cannot install in the image: no build for its Python {IMAGE_PYTHON} "
                              f"({shown}; TensorFlow's tested build configurations); the image holds {image}", valid)
    if second:
        return problem(field, f"{where} installs a second TensorFlow ({pin.name}) over the image's {image}: both "
                              "are the tensorflow package, and the one installed last wins", valid)
    target = (f"TensorFlow {', '.join(wanted[:3])}" if wanted else
              "a TensorFlow release that TensorFlow's table (read 2026-11-29) does not list")
    return problem(field, f"{where} would replace the image's {image} with {target} (its tf_keras {image_series} and "
                          "Keras 3 would no longer match it, and a local run would go on using this environment's "
                          "TensorFlow: not what runs on Vertex); for another TensorFlow, build on another base image "
                          "(container.base_image)", valid)


def _companion_problem(pin: Pin, field: str, variant: str) -> Problem | None:
    """tf_keras pins TensorFlow to its own release series; Keras below 3 is not what TensorFlow 2.16+ imports."""
    image_dist, image_series = IMAGE_TENSORFLOW[variant]
    where = f"line {pin.line} ({pin.text})"
    if pin.name == "tf-keras" and pin.specifier and not admits(pin.specifier, image_series):
        return problem(field, f"{where}: tf_keras 2.X requires tensorflow 2.X, so it would replace the image's "
                              f"{image_dist} {image_series}; the image already holds tf_keras {image_series}",
                       [f"remove the line (the image's tf_keras {image_series} is used)", f"tf_keras=={image_series}.*"])
    if pin.name == "keras" and pin.specifier and not any(admits(pin.specifier, f"3.{m}") for m in range(40)):
        return problem(field, f"{where} would replace the image's Keras 3, which its {image_dist} {image_series} "
                              "requires; Keras 2 code runs unchanged as tf_keras, which the image holds (import tf_keras "
                              "as keras, or tf.keras with trainer.env TF_USE_LEGACY_KERAS=1)",
                       ["remove the line", "tf_keras"])
    return None


def image_pin_problems(text: str, variant: str) -> list[Problem]:
    """One problem per line of the requirements ``text`` that cannot install in the job's image (``variant``: its
    TensorFlow) or would replace the TensorFlow, tf_keras or Keras it holds (see the module doc)."""
    field, out = "trainer.requirements", []
    for pin in read_pins(text):
        if pin.name in TENSORFLOW_DISTRIBUTIONS:
            found = _tensorflow_problem(pin, field, variant)
        else:
            found = _companion_problem(pin, field, variant)
        if found is not None:
            out.append(found)
    return out


def read_text(path: str) -> str:
    """A requirements file's text ("" when it cannot be read: its own check says why)."""
    try:
        return read_regular(path, "trainer.requirements").decode("utf-8", "replace")
    except (OSError, NotARegularFile):
        return ""


#: import names whose distribution is named otherwise (the common ones; any other is matched by canonical name)
IMPORT_NAMES = {"sklearn": "scikit-learn", "PIL": "pillow", "yaml": "pyyaml", "cv2": "opencv-python",
                "hypertune": "cloudml-hypertune", "dateutil": "python-dateutil", "bs4": "beautifulsoup4",
                "absl": "absl-py", "google.protobuf": "protobuf", "attr": "attrs", "skimage": "scikit-image"}


def listed(path: str, module: str) -> Pin | None:
    """The line of the requirements file ``path`` that installs ``module`` (``tensorflow_datasets``:
    ``tensorflow-datasets==4.9.2``; ``google.cloud.storage``: ``google-cloud-storage``), else None."""
    parts = module.split(".")
    wanted = {canonicalize_name(".".join(parts[:i])) for i in range(1, len(parts) + 1)}
    wanted |= {canonicalize_name(IMPORT_NAMES[n]) for n in (parts[0], ".".join(parts[:2])) if n in IMPORT_NAMES}
    if parts[0] == "cv2":
        wanted.add("opencv-python-headless")
    return next((pin for pin in read_pins(read_text(path)) if pin.name in wanted), None)


def module_name(text: str) -> str | None:
    """The module of ``No module named 'x.y'`` in a line, else None."""
    m = re.search(r"No module named '([\w.]+)'", text)
    return m.group(1) if m else None
