"""Every architecture builds for the configured size and returns float32 class probabilities."""
import numpy as np
import pytest

from trainers.models import MODELS, build_model


@pytest.mark.parametrize("name", MODELS)
def test_model_outputs_probabilities(name):
    model = build_model(name, 32, 5)
    assert model.input.name.startswith("image") or model.inputs[0].name.startswith("image")
    out = np.asarray(model(np.random.default_rng(0).uniform(0, 255, (2, 32, 32, 3)).astype("float32")))
    assert out.shape == (2, 5) and out.dtype == np.float32
    np.testing.assert_allclose(out.sum(-1), 1.0, rtol=1e-5)


def test_unknown_model_names_the_field():
    with pytest.raises(ValueError, match="model.name: unknown model 'vgg'; valid choices: small_cnn"):
        build_model("vgg", 32, 3)
