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
eager import loads. Where the file cannot be read this way (a TensorFlow whose ``__init__`` differs), the plain
import runs instead.

Why by hand: TensorFlow has no lazy mode for its top level (``tensorflow.python.util.lazy_loader`` serves
single names, ``lazy_loader`` of scientific-python needs the package's own ``__init__`` written for it).
"""
from __future__ import annotations

import ast
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import Any

#: attribute of a lazily imported ``tensorflow`` module: {name: (module, attribute)} of the re-exports not yet used
LAZY = "_vtp_lazy_names"
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


def _lazy_module() -> ModuleType:
    """``tensorflow`` imported with its re-exports lazy (module docstring); raises what its ``__init__`` raises."""
    spec = importlib.util.find_spec("tensorflow")
    if spec is None or not spec.origin:
        raise ImportError("tensorflow is not installed")
    code, lazy = _deferred(spec.origin)
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


def import_tensorflow() -> ModuleType:
    """``tensorflow``, lazily (module docstring), without Keras. A no-op where TensorFlow is already imported;
    where Keras already is, the plain import (Keras brought in what it needs of TensorFlow already)."""
    if "tensorflow" in sys.modules:
        return sys.modules["tensorflow"]
    if any(name in sys.modules for name in _KerasRefused.NAMES):
        import tensorflow as tf

        return tf
    refusal = _KerasRefused()
    sys.meta_path.insert(0, refusal)
    try:
        try:
            return _lazy_module()
        except Exception:  # a TensorFlow whose __init__ this cannot read: the plain import, still without Keras
            import tensorflow as tf

            return tf
    finally:
        sys.meta_path.remove(refusal)
