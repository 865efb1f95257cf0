"""Model architectures. Every model takes float32 pixels in 0..255 (input named ``image``) and returns
class probabilities (float32 even under mixed precision)."""
from __future__ import annotations

MODELS = ("small_cnn", "mobilenet_v2", "resnet50")


def build_model(name: str, image_size: int, num_classes: int):
    import keras
    from keras import layers

    inputs = keras.Input(shape=(image_size, image_size, 3), name="image", dtype="float32")
    if name == "small_cnn":  # the Vertex lab seed's model
        x = layers.Rescaling(1.0 / 255)(inputs)
        for filters in (16, 32, 64):
            x = layers.Conv2D(filters, 3, padding="same", activation="relu")(x)
            x = layers.MaxPooling2D()(x)
        x = layers.Flatten()(x)
        x = layers.Dense(128, activation="relu")(x)
        logits = layers.Dense(num_classes, name="logits")(x)
    elif name in ("mobilenet_v2", "resnet50"):
        x = layers.Rescaling(1.0 / 127.5, offset=-1.0)(inputs)
        app = keras.applications.MobileNetV2 if name == "mobilenet_v2" else keras.applications.ResNet50
        base = app(weights=None, include_top=False, input_shape=(image_size, image_size, 3), pooling="avg")
        x = base(x)
        logits = layers.Dense(num_classes, name="logits")(x)
    else:
        raise ValueError(f"model.name: unknown model {name!r}; valid choices: {', '.join(MODELS)}")
    probabilities = layers.Activation("softmax", dtype="float32", name="probabilities")(logits)
    return keras.Model(inputs, probabilities, name=name)
