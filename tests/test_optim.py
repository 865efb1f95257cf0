"""Fused optimizers (``trainers.optim``): Keras's maths and state in one kernel per variable, under one
device and under MirroredStrategy (each device's copy of a slot is the one updated)."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]


def _one_step(make, strategy=None):
    import keras
    import tensorflow as tf

    from trainers.models import build_model

    strategy = strategy or tf.distribute.get_strategy()
    keras.backend.clear_session()  # names from a fresh start, whatever other tests in this process made before
    keras.utils.set_random_seed(3)
    with strategy.scope():
        model = build_model("small_cnn", 16, 3)
        opt = make()
        opt.build(model.trainable_variables)
    x = tf.random.stateless_uniform([4, 16, 16, 3], seed=[1, 2], maxval=255.0)
    y = tf.constant([0, 1, 2, 0])
    before = [w.copy() for w in model.get_weights()]
    for _ in range(2):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(y, model(x, training=True)))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return before, model, opt


@pytest.mark.parametrize("kind", ["adam", "sgd"])
def test_fused_update_equals_keras_update_and_keeps_keras_state(kind):
    import keras

    from trainers.optim import FusedAdam, FusedSGD

    plain = (lambda: keras.optimizers.Adam(1e-3)) if kind == "adam" else (lambda: keras.optimizers.SGD(0.05, momentum=0.9))
    fused = (lambda: FusedAdam(1e-3)) if kind == "adam" else (lambda: FusedSGD(0.05, momentum=0.9))
    before, m1, o1 = _one_step(plain)
    _, m2, o2 = _one_step(fused)
    moved = max(float(np.abs(a - b).max()) for a, b in zip(m1.get_weights(), before))
    assert moved > 1e-4  # the step really changed the weights
    for a, b in zip(m1.get_weights(), m2.get_weights()):
        np.testing.assert_allclose(a, b, atol=1e-6, rtol=1e-5)
    same = lambda o: [(v.path.split("/")[0], v.path.rsplit("_", 1)[-1], tuple(v.shape)) for v in o.variables]  # noqa: E731
    assert same(o1) == same(o2)  # same slots, same names and shapes: interchangeable checkpoints
    for a, b in zip(o1.variables, o2.variables):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6, rtol=1e-5)
    assert int(o2.iterations.numpy()) == 2


def test_variants_without_a_fused_kernel_fall_back_to_keras():
    from trainers.optim import FusedAdam, FusedSGD

    for make in (lambda: FusedAdam(1e-3, amsgrad=True), lambda: FusedSGD(0.05), lambda: FusedSGD(0.05, 0.9, nesterov=True)):
        before, model, _ = _one_step(make)
        assert any(not np.array_equal(a, b) for a, b in zip(model.get_weights(), before))


@pytest.mark.integration
def test_under_mirrored_strategy_every_device_copy_of_weights_and_slots_is_updated():
    code = textwrap.dedent("""
        import numpy as np, tensorflow as tf
        from trainers.strategy import setup_cpu_replicas
        setup_cpu_replicas(2)
        from tests.test_optim import _one_step
        from trainers.optim import FusedAdam
        import keras
        s = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice())
        before, m1, o1 = _one_step(lambda: keras.optimizers.Adam(1e-3), s)
        _, m2, o2 = _one_step(lambda: FusedAdam(1e-3), s)
        for v in list(m2.trainable_variables) + list(o2.variables):
            copies = [c.numpy() for c in v.value.values]
            assert len(copies) == 2 and np.array_equal(copies[0], copies[1]), v.path
        for a, b in zip(m1.get_weights(), m2.get_weights()):
            np.testing.assert_allclose(a, b, atol=1e-6, rtol=1e-5)
        assert any(np.abs(a - b).max() > 1e-4 for a, b in zip(m2.get_weights(), before))
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]
