"""A small, learnable, deterministic flower-like image dataset for runs that need no download.

Layout as in the Vertex lab: ``<root>/<class>/<class>_0001.jpg`` with classes daisy, dandelion, roses,
sunflowers, tulips, class_5, ... Each class has its own petal count, shape and colours, drawn at a random
position, scale, rotation and brightness on a noisy background, so a small CNN has something real to learn.
"""
from __future__ import annotations

import io
import logging
import uuid

from trainers import fileio, record_reader
from jobfile.errors import ConfigError, Problem, problem
from jobfile.paths import join

log = logging.getLogger(__name__)

SYNTHETIC_VERSION = 1
SYNTHETIC_MARKER = ".synthetic.json"
FLOWER_NAMES = ("daisy", "dandelion", "roses", "sunflowers", "tulips")
F_PATH = "data.path"
F_SIZE = "data.image_size"
F_SYN_CLASSES = "data.synthetic_classes"
F_SYN_PER_CLASS = "data.synthetic_images_per_class"



def synthetic_class_names(num_classes: int) -> list[str]:
    return [FLOWER_NAMES[i] if i < len(FLOWER_NAMES) else f"class_{i}" for i in range(num_classes)]


# (petal count, petal width / length, petal RGB, centre RGB, centre radius / flower radius)
_FLOWER_STYLES = {
    "daisy": (13, 0.30, (245, 245, 238), (240, 195, 35), 0.25),
    "dandelion": (30, 0.14, (250, 215, 30), (225, 170, 20), 0.22),
    "roses": (7, 0.75, (200, 25, 45), (110, 10, 25), 0.30),
    "sunflowers": (17, 0.34, (250, 160, 15), (75, 45, 20), 0.45),
    "tulips": (5, 0.70, (215, 55, 160), (245, 225, 90), 0.14),
}


def _style(index: int, name: str):
    if name in _FLOWER_STYLES:
        return _FLOWER_STYLES[name]
    import colorsys

    hue = (index * 0.61803398875) % 1.0
    petal = tuple(int(255 * c) for c in colorsys.hsv_to_rgb(hue, 0.85, 0.95))
    centre = tuple(int(255 * c) for c in colorsys.hsv_to_rgb((hue + 0.5) % 1.0, 0.8, 0.6))
    return (5 + (index * 3) % 17, 0.2 + 0.1 * (index % 5), petal, centre, 0.15 + 0.05 * (index % 4))


def _draw_flower(draw, rng, cx, cy, radius, style, jitter) -> None:
    import numpy as np

    n_petals, width, petal_rgb, centre_rgb, centre_frac = style
    petal = tuple(int(np.clip(c + j, 0, 255)) for c, j in zip(petal_rgb, jitter))
    rotation = rng.uniform(0, 2 * np.pi)
    t = np.linspace(0, 2 * np.pi, 18, endpoint=False)
    half_len, half_wid = radius * 0.5, radius * 0.5 * width
    for k in range(n_petals):
        a = rotation + 2 * np.pi * k / n_petals + rng.normal(0, 0.05)
        scale = rng.uniform(0.85, 1.1)
        px = cx + np.cos(a) * half_len * scale
        py = cy + np.sin(a) * half_len * scale
        ex, ey = half_len * scale * np.cos(t), half_wid * np.sin(t)
        xs = px + ex * np.cos(a) - ey * np.sin(a)
        ys = py + ex * np.sin(a) + ey * np.cos(a)
        shade = rng.uniform(0.88, 1.0)
        fill = tuple(int(c * shade) for c in petal)
        draw.polygon([(float(x), float(y)) for x, y in zip(xs, ys)], fill=fill)
    r = radius * centre_frac
    draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=tuple(centre_rgb))


#: (height range, width range) of the real flowers photos (tf_flowers: mostly 240..500 px a side, landscape).
FLOWERS_SHAPES = ((240, 360), (320, 500))


def flowers_shape(seed: int, class_index: int, image_index: int) -> tuple[int, int]:
    """A deterministic (height, width) in the real flowers set's range, for ``shape="flowers"``."""
    import numpy as np

    rng = np.random.default_rng([seed, class_index, image_index, 7])
    (h0, h1), (w0, w1) = FLOWERS_SHAPES
    return int(rng.integers(h0, h1 + 1)), int(rng.integers(w0, w1 + 1))


def _synthetic_image(class_index: int, name: str, image_index: int, image_size: int, seed: int,
                     shape: tuple[int, int] | None = None) -> bytes:
    """One deterministic JPEG: petals of a class colour around a centre on a noisy green/brown field.
    ``shape`` = (height, width): drawn square at half the larger side, then resized to it (as photos are)."""
    import numpy as np
    from PIL import Image, ImageDraw

    rng = np.random.default_rng([seed, class_index, image_index])
    # small images: draw at 2x and downsample (smooth edges); photo-sized ones: draw at half size, upsample,
    # then add pixel noise at full size (keeps generation ~4x cheaper, JPEGs photo-like in size)
    big = image_size * 2 if shape is None else max(shape) // 2
    # Background: blurry green/brown blotches plus pixel noise.
    greens = np.array([[70, 125, 45], [95, 150, 60], [60, 100, 40]], dtype=np.float64)
    browns = np.array([[115, 85, 50], [95, 70, 45], [135, 105, 65]], dtype=np.float64)
    palette = np.concatenate([greens, browns])
    grid = palette[rng.integers(0, len(palette), size=(6, 6))] + rng.normal(0, 12, size=(6, 6, 3))
    bg = Image.fromarray(np.clip(grid, 0, 255).astype(np.uint8)).resize((big, big), Image.BILINEAR)
    arr = np.asarray(bg).astype(np.float64) + rng.normal(0, 10, size=(big, big, 3))
    img = Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(img)
    style = _style(class_index, name)
    jitter = rng.normal(0, 12, size=3)
    radius = rng.uniform(0.22, 0.40) * big
    cx, cy = rng.uniform(0.3, 0.7, size=2) * big
    # a stem
    draw.line([(cx, cy), (cx + rng.uniform(-0.1, 0.1) * big, big)], fill=(40, 110, 35),
              width=max(1, big // 40))
    if rng.uniform() < 0.3:  # sometimes a second, smaller flower of the same kind
        r2 = radius * rng.uniform(0.4, 0.6)
        x2, y2 = rng.uniform(0.15, 0.85, size=2) * big
        _draw_flower(draw, rng, x2, y2, r2, style, jitter)
    _draw_flower(draw, rng, cx, cy, radius, style, jitter)
    img = img.resize((image_size, image_size) if shape is None else (shape[1], shape[0]), Image.BILINEAR)
    brightness = rng.uniform(0.75, 1.2)
    arr = np.asarray(img).astype(np.float64) * brightness
    if shape is not None:
        arr += rng.normal(0, 6, size=arr.shape)
    arr = np.clip(arr, 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="JPEG", quality=92)
    return buf.getvalue()


def synthesize_image_folder(root: str, num_classes: int = 3, images_per_class: int = 40,
                            image_size: int = 64, seed: int = 0, shape: str = "square") -> list[str]:
    """Write a small, learnable, deterministic flower-like JPEG dataset; return the image paths.

    Layout ``<root>/<class>/<class>_0001.jpg`` with classes daisy, dandelion, roses, sunflowers,
    tulips, class_5, ...  Same parameters -> same bytes.  If ``root`` already holds exactly this
    content (``.synthetic.json`` marker + files) nothing is written.  Built in a temporary sibling
    directory and renamed into place (object stores: files first, the marker last).  An existing
    non-empty ``root`` that was not synthesized here is never overwritten.
    ``shape="flowers"``: each image gets its own size in the real flowers photos' range
    (:data:`FLOWERS_SHAPES`) instead of ``image_size`` square -- what benchmarks need to time decoding.
    """
    problems: list[Problem] = []
    if not isinstance(num_classes, int) or num_classes < 2:
        problems.append(problem(F_SYN_CLASSES, f"must be an integer >= 2, got {num_classes!r}"))
    if not isinstance(images_per_class, int) or images_per_class < 1:
        problems.append(problem(F_SYN_PER_CLASS, f"must be an integer >= 1, got {images_per_class!r}"))
    if not isinstance(image_size, int) or image_size < 8:
        problems.append(problem(F_SIZE, f"must be an integer >= 8 for synthetic images, got {image_size!r}"))
    if not root:
        problems.append(problem(F_PATH, "is empty; give a folder to write the synthetic images to"))
    if problems:
        raise ConfigError(problems)

    root = root.rstrip("/")
    names = synthetic_class_names(num_classes)
    rel_files = [f"{c}/{c}_{i + 1:04d}.jpg" for c in names for i in range(images_per_class)]
    marker = {"generator": "trainers.prepare.synthesize_image_folder", "version": SYNTHETIC_VERSION,
              "num_classes": num_classes, "images_per_class": images_per_class,
              "image_size": image_size, "seed": seed, "num_files": len(rel_files)}
    if shape != "square":
        marker["shape"] = shape
    paths = [join(root, r) for r in rel_files]

    existing = record_reader.read_or_none(join(root, SYNTHETIC_MARKER))
    if existing == marker and all(fileio.exists(p) for p in paths):
        log.info("synthetic dataset already present at %s", root)
        return paths

    def ours(path: str) -> bool:
        return record_reader.read_or_none(join(path, SYNTHETIC_MARKER)) is not None or not fileio.listdir(path)

    if fileio.exists(root) and not (fileio.isdir(root) and ours(root)):
        raise ConfigError(problem(
            F_PATH, f"{root!r} already exists and is not a synthetic dataset written by this step; "
                    "choose a new or empty folder for the synthetic images"))

    local = fileio.is_local(root)
    if local:
        parent, base = fileio.split_parent(root)
        fileio.makedirs(parent)
        target = join(parent, f".{base}.tmp-{uuid.uuid4().hex[:8]}")
    else:
        target = root
        fileio.remove_quiet(join(root, SYNTHETIC_MARKER))  # incomplete until the marker is back
    try:
        for ci, name in enumerate(names):
            fileio.makedirs(join(target, name))
            for i in range(images_per_class):
                data = _synthetic_image(ci, name, i, image_size, seed,
                                        flowers_shape(seed, ci, i) if shape == "flowers" else None)
                fileio.write_bytes(join(target, f"{name}/{name}_{i + 1:04d}.jpg"), data)
        fileio.write_bytes(join(target, SYNTHETIC_MARKER), fileio.json_bytes(marker))
        if local:
            fileio.install_dir(target, root, ours, F_PATH)
    except BaseException:
        if local:
            fileio.rmtree_quiet(target)
        raise
    log.info("wrote %d synthetic images in %d classes to %s", len(paths), num_classes, root)
    return paths
