"""``import tensorflow`` for the verify step: only what loading a SavedModel and running it needs.

TensorFlow 2.21's ``__init__`` imports its whole public API eagerly: 306 names (44 of them ``tensorflow._api.v2``
namespaces), about 2,500 modules, and Keras (``keras.src.optimizers``) at the end. The verify step needs few of
them (``tf.saved_model.load``, ``tf.io``, ``tf.data``, a few ops). Measured on 2 cores (AMD EPYC Zen 3), fresh
processes: the plain import 5.6-6.9 s (3.2-3.5 s with Keras refused), this one 1.8-2.3 s (920 modules; loading
a SavedModel brings in ~280 more); the pipeline's verify step 7.1 s -> 3.1 s with ``jobs.steps.step_exit``, the
same record (``docs/performance.md``, "The fixed cost, part by part").

How (:func:`import_tensorflow`): TensorFlow's own ``__init__.py`` is run, statement by statement as written,
except its public re-exports (``from tensorflow._api.v2 import io``, ``from tensorflow.python.ops.array_ops
import concat`` ...), which become entries of the module's ``__getattr__`` (:class:`_LazyModule`): ``tf.io`` imports
``tensorflow._api.v2.io`` on first use, as the eager line would have, and keeps it. Everything else in the file
runs unchanged: ``pywrap_tensorflow`` (the C++ runtime and every op and kernel), TF2 behaviour, ``__path__``,
the kernel and plugin libraries, ``tf.keras``'s lazy loader; so does ``tf.__operators__`` (:data:`EAGER`). Keras itself is refused while the file runs
(:class:`_KerasRefused`): TensorFlow imports it "so that registration of optimizers in the SavedModel registry"
happens, and guards it with ``except ImportError: pass`` for an installation without Keras, the path taken
here. Why that is safe for loading: Keras 3 registers nothing with the SavedModel loader (no
``register_revived_type``/serializable in ``keras/src``), so a Keras 3 process revives every export exactly as
this one does; the one Keras type the loader needs (a legacy optimizer saved in a Keras 2 model) it imports
itself, lazily, and Keras stays importable here once TensorFlow is in.

What can differ from the eager import: a registration made by a module that nothing imports until its name is
used (a ``TypeSpec`` or revived type of an API the model's signatures use but the loader does not import). So
a load that fails under the lazy import is retried after :func:`complete` has imported every remaining name, i.e.
after the very import ``import tensorflow`` makes (``jobs.steps.verify.load``): a model is never refused that the
eager import loads.

When the rewrite runs, and what runs instead (the plain ``import tensorflow``, Keras still refused: by its own
figures ~70 % of the gain, 5.6-6.9 s -> 3.2-3.5 s; the rewrite the remaining ~1.3 s):

* only for a TensorFlow whose version it was tested with (:data:`TESTED_VERSIONS`, read from the installed
  distribution's metadata without importing it); any other version takes the plain import;
* a file it cannot read (no re-exports, unparsable) takes the plain import, in the same process: nothing of
  TensorFlow has run yet;
* a failure while TensorFlow's statements run (the C++ runtime loaded, half the modules imported) never continues in
  that process: this process starts again from its beginning (``os.execve`` of its own command line, ``sys.orig_argv``)
  with :data:`FRESH` set, and the fresh process takes the plain import. A step calls this before its work (verify
  does), so nothing is done twice but what preceded the import; an interactive session, which cannot start again,
  gets one ImportError line instead.

Why by hand: TensorFlow has no lazy mode for its top level (``tensorflow.python.util.lazy_loader`` serves
single names, ``lazy_loader`` of scientific-python needs the package's own ``__init__`` written for it).
"""
from __future__ import annotations

import ast
import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import sys
from types import ModuleType
from typing import Any

#: attribute of a lazily imported ``tensorflow`` module: {name: (module, attribute)} of the re-exports not yet used
LAZY = "_vtp_lazy_names"
#: the TensorFlow versions whose generated ``__init__`` this rewrite was tested with (``tests/test_step_processes.py``,
#: ``benchmarks/pipeline_steps.py``); any other version takes the plain import
TESTED_VERSIONS = ("2.21.0",)
#: the distributions that install the ``tensorflow`` package (``pyproject.toml``'s variants and the CPU build)
DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tensorflow-tpu", "tensorflow-intel")
#: set (to ``plain``) in the environment of the fresh process a failed rewrite starts: that process, or one a
#: benchmark starts so, takes the plain import; read once, and taken out of the environment
FRESH = "VTP_TENSORFLOW_IMPORT"
#: re-exports imported as written: importing ``tf.__operators__`` gives ``Tensor`` its operators (``+``, ``==``,
#: ``[]``: ``math_ops``, ``tensor_getitem_override``), which code uses without naming anything of TensorFlow
EAGER = ("__operators__",)


class _KerasRefused(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """A finder that answers for ``keras`` and ``tf_keras`` with their real location (TensorFlow's ``__init__``
    reads it to set ``tf.keras``'s path) and a loader that refuses to run them (``ImportError``)."""
    NAMES = ("keras", "tf_keras")

    def find_spec(self, fullname, path=None, target=None):
        found = importlib.machinery.PathFinder.find_spec(fullname) if fullname in self.NAMES else None
        if found is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, origin=found.origin, is_package=True)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        raise ImportError(f"{module.__name__} is not imported while TensorFlow is (jobs.steps.tensorflow_import)")


def _reexport(node: ast.stmt) -> bool:
    """A public re-export of TensorFlow's generated ``__init__``: ``from tensorflow._api.v2|tensorflow.python.X
    import name`` binding public or dunder names (``_``-prefixed ones are the file's own helpers, used by its
    code)."""
    if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module):
        return False
    if not (node.module.startswith("tensorflow._api.v2") or node.module.startswith("tensorflow.python.")):
        return False
    bound = [alias.asname or alias.name for alias in node.names]
    return all(name != "*" and name not in EAGER and (not name.startswith("_") or name.startswith("__"))
               for name in bound)


def _deferred(origin: str) -> tuple[Any, dict[str, tuple[str, str]]]:
    """(the code of TensorFlow's ``__init__`` at ``origin`` without its re-exports, {name: (module, attribute)} of
    those); raises ImportError for a file with none (nothing to defer: not a generated file this reads)."""
    with open(origin, encoding="utf-8") as f:
        tree = ast.parse(f.read(), origin)
    lazy: dict[str, tuple[str, str]] = {}
    kept = []
    for node in tree.body:
        if _reexport(node):
            lazy.update({alias.asname or alias.name: (node.module, alias.name) for alias in node.names})
        else:
            kept.append(node)
    if not lazy:
        raise ImportError(f"{origin} has no re-exports to defer")
    tree.body = kept
    return compile(tree, origin, "exec"), lazy


class _LazyModule(ModuleType):
    """``tensorflow`` with deferred re-exports (``LAZY``: {name: (module, attribute)}): a name is imported on first
    use (:meth:`resolve`) and kept.

    One difference from the eager import until :func:`complete`: two API names are also subpackages of
    ``tensorflow`` (``tensorflow/lite``, ``tensorflow/distribute``); where TensorFlow's own modules import those
    (``import tensorflow.distribute.experimental.rpc.kernels.gen_rpc_ops as ...``) the import system binds the
    subpackage to the name, as it does while the eager ``__init__`` runs, and ``tf.distribute`` is that
    subpackage, not the API namespace, until it is resolved. Nothing the verify step runs uses either."""

    def resolve(self, name: str) -> Any:
        source, attr = self.__dict__[LAZY][name]
        parent = importlib.import_module(source)
        try:
            value = getattr(parent, attr)
        except AttributeError:  # a namespace not imported yet: ``from tensorflow._api.v2 import io``
            value = importlib.import_module(f"{source}.{attr}")
        self.__dict__[LAZY].pop(name, None)
        setattr(self, name, value)
        return value

    def __getattr__(self, name: str) -> Any:
        if name not in self.__dict__.get(LAZY, {}):
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        return self.resolve(name)

    def __dir__(self) -> list[str]:
        return sorted(set(self.__dict__) | set(self.__dict__.get(LAZY, {})))


def _prepared():
    """(TensorFlow's spec, the code of its ``__init__`` without its re-exports, the re-exports) where the file can be
    read so; None where it cannot (nothing of TensorFlow has run: the plain import may follow in this process)."""
    spec = importlib.util.find_spec("tensorflow")
    if spec is None or not spec.origin:
        return None
    try:
        code, lazy = _deferred(spec.origin)
    except (ImportError, OSError, SyntaxError, ValueError):
        return None
    return spec, code, lazy


def _lazy_module(spec, code, lazy: dict[str, tuple[str, str]]) -> ModuleType:
    """``tensorflow`` imported with its re-exports lazy (module docstring); raises what its ``__init__`` raises."""
    module = importlib.util.module_from_spec(spec)
    module.__dict__[LAZY] = lazy
    module.__class__ = _LazyModule
    sys.modules["tensorflow"] = module
    try:
        exec(code, module.__dict__)
    except BaseException:
        sys.modules.pop("tensorflow", None)
        raise
    module.__all__ = sorted(set(getattr(module, "__all__", ())) | {n for n in lazy if not n.startswith("_")})
    return module


def complete(tf: ModuleType) -> bool:
    """Import every re-export a lazily imported ``tensorflow`` has not imported yet, each bound as the eager import
    binds it: afterwards it is what the eager import makes. True where something was left to import."""
    lazy = tf.__dict__.get(LAZY)
    if not lazy:
        return False
    for name in list(lazy):
        if name in lazy:
            tf.resolve(name)
    return True


def installed_version() -> str | None:
    """The version of the installed distribution whose ``tensorflow`` package Python would import (its metadata,
    beside the package; TensorFlow itself is not imported); None where none is found."""
    spec = importlib.util.find_spec("tensorflow")
    if spec is None or not spec.origin:
        return None
    for name in DISTRIBUTIONS:
        try:
            distribution = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        if os.path.realpath(distribution.locate_file("tensorflow/__init__.py")) == os.path.realpath(spec.origin):
            return distribution.version
    return None


def _start_again_plainly(exc: Exception):
    """After a failure midway through the rewrite: this process's own command line again, as a fresh process with
    :data:`FRESH` set (module docstring); never returns. Where there is no command to start again (an interactive
    session), one ImportError line."""
    why = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
    argv = list(getattr(sys, "orig_argv", None) or [])
    if len(argv) < 2 or sys.flags.interactive:
        raise ImportError(f"TensorFlow's lazy import stopped midway ({why}); this session cannot start again: start "
                          f"it with {FRESH}=plain for the plain import") from None
    print(f"note: TensorFlow's lazy import stopped midway ({why}); this process starts again, with the plain import",
          file=sys.stderr)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    os.execve(sys.executable, [sys.executable, *argv[1:]], {**os.environ, FRESH: "plain"})


def import_tensorflow() -> ModuleType:
    """``tensorflow`` without Keras: lazily (module docstring) where that was tested, else as written. A no-op where
    TensorFlow is already imported; where Keras already is, the plain import (Keras brought in what it needs of
    TensorFlow already)."""
    if "tensorflow" in sys.modules:
        return sys.modules["tensorflow"]
    plain = os.environ.pop(FRESH, "") == "plain"
    if any(name in sys.modules for name in _KerasRefused.NAMES):
        import tensorflow as tf

        return tf
    refusal = _KerasRefused()
    sys.meta_path.insert(0, refusal)
    try:
        prepared = None if plain or installed_version() not in TESTED_VERSIONS else _prepared()
        if prepared is None:  # the plain import, still without Keras
            import tensorflow as tf

            return tf
        try:
            return _lazy_module(*prepared)
        except Exception as exc:  # TensorFlow half made in this process: never go on with it
            _start_again_plainly(exc)
    finally:
        sys.meta_path.remove(refusal)
