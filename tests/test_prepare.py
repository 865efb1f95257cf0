"""trainers.prepare: synthetic images, TFRecord preparation, validation, atomicity, CLI."""
from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from trainers import fileio, prepare
from jobfile.errors import ConfigError

CLASSES, PER_CLASS, SIZE = 3, 8, 24


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _leftovers(parent: Path) -> list[str]:
    return [p.name for p in parent.iterdir() if ".tmp-" in p.name or ".old-" in p.name]


def _records(out_dir: str, split: str, manifest: dict) -> list[dict]:
    import tensorflow as tf

    out = []
    for name in manifest["files"][split]:
        for raw in tf.data.TFRecordDataset(f"{out_dir}/{name}").as_numpy_iterator():
            ex = tf.train.Example.FromString(raw)
            f = ex.features.feature
            out.append({
                "shard": name,
                "raw": f["image/raw"].bytes_list.value[0],
                "height": f["image/height"].int64_list.value[0],
                "width": f["image/width"].int64_list.value[0],
                "label": f["label"].int64_list.value[0],
                "path": f["image/path"].bytes_list.value[0].decode(),
            })
    return out


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("syn") / "flowers"
    prepare.synthesize_image_folder(str(root), CLASSES, PER_CLASS, SIZE, seed=0)
    return root


@pytest.fixture
def image_copy(images, tmp_path) -> Path:
    dst = tmp_path / "images"
    shutil.copytree(images, dst)
    return dst


def _problems(err: ConfigError) -> list[str]:
    return [str(p) for p in err.problems]


# --------------------------------------------------------------------------- synthesize

def test_synthesize_layout_deterministic_idempotent(images, tmp_path):
    paths = prepare.synthesize_image_folder(str(images), CLASSES, PER_CLASS, SIZE, seed=0)
    assert len(paths) == CLASSES * PER_CLASS
    assert sorted(p.name for p in images.iterdir() if p.is_dir()) == ["daisy", "dandelion", "roses"]
    assert (images / "daisy" / "daisy_0001.jpg").is_file()
    assert json.loads((images / ".synthetic.json").read_text())["seed"] == 0
    with Image.open(images / "roses" / "roses_0003.jpg") as im:
        assert im.format == "JPEG" and im.size == (SIZE, SIZE) and im.mode == "RGB"

    # same parameters elsewhere -> same bytes
    other = tmp_path / "again"
    prepare.synthesize_image_folder(str(other), CLASSES, PER_CLASS, SIZE, seed=0)
    assert _files(other) == _files(images)
    # idempotent: nothing rewritten
    mtimes = {p: p.stat().st_mtime_ns for p in other.rglob("*")}
    assert prepare.synthesize_image_folder(str(other), CLASSES, PER_CLASS, SIZE, seed=0) == \
        [str(other / r) for r in sorted(_files(images)) if not r.startswith(".")]
    assert {p: p.stat().st_mtime_ns for p in other.rglob("*")} == mtimes
    assert _leftovers(tmp_path) == []
    # another seed -> other pictures, and the folder is replaced in place (it is ours)
    prepare.synthesize_image_folder(str(other), CLASSES, PER_CLASS, SIZE, seed=1)
    assert _files(other)["daisy/daisy_0001.jpg"] != _files(images)["daisy/daisy_0001.jpg"]
    assert _leftovers(tmp_path) == []


def test_synthetic_classes_differ_in_colour(images):
    """A tiny CNN learns these fast because class colour dominates: check the class means differ."""
    means = {}
    for cls in ("daisy", "dandelion", "roses"):
        arrs = [np.asarray(Image.open(p), dtype=np.float64) for p in sorted((images / cls).glob("*.jpg"))]
        means[cls] = np.mean([a.reshape(-1, 3).mean(0) for a in arrs], axis=0)
    assert means["roses"][0] - means["roses"][1] > 20          # red
    assert means["dandelion"][1] - means["roses"][1] > 20      # yellow has more green than red
    assert means["daisy"][2] - means["dandelion"][2] > 20      # white has more blue than yellow


def test_synthesize_refuses_foreign_folder(tmp_path):
    root = tmp_path / "mine"
    root.mkdir()
    (root / "notes.txt").write_text("user data")
    with pytest.raises(ConfigError) as err:
        prepare.synthesize_image_folder(str(root), 2, 2, 16)
    assert "data.path" in str(err.value) and "not a synthetic dataset" in str(err.value)
    assert (root / "notes.txt").read_text() == "user data"
    with pytest.raises(ConfigError) as err:
        prepare.synthesize_image_folder(str(tmp_path / "x"), 1, 0, 4)
    assert {p.field for p in err.value.problems} == {
        "data.synthetic_classes", "data.synthetic_images_per_class", "data.image_size"}


# --------------------------------------------------------------------------- prepare

def test_prepare_writes_shards_manifest_and_counts(images, tmp_path):
    out = tmp_path / "records"
    m = prepare.prepare_tfrecords(str(images), str(out), image_size=16, num_shards=4,
                                  validation_fraction=0.25, seed=0)
    n = CLASSES * PER_CLASS
    assert m["classes"] == ["daisy", "dandelion", "roses"]
    assert m["image_size"] == 16 and m["seed"] == 0 and m["source"] == str(images)
    assert sum(m["num_examples"].values()) == n
    assert sum(sum(c.values()) for c in m["counts"].values()) == n
    for split in ("train", "validation"):
        assert sum(m["counts"][split].values()) == m["num_examples"][split] > 0
        assert sum(s["num_examples"] for s in m["shards"][split]) == m["num_examples"][split]
        assert [s["file"] for s in m["shards"][split]] == m["files"][split]
    assert m["files"]["train"] == [f"train-0000{i}-of-00004.tfrecord" for i in range(4)]
    k = len(m["files"]["validation"])
    assert 1 <= k <= 4 and m["files"]["validation"][0] == f"validation-00000-of-{k:05d}.tfrecord"
    assert json.loads((out / "manifest.json").read_text()) == m
    assert json.loads((out / "classes.json").read_text()) == m["classes"]
    assert json.loads((out / "counts.json").read_text())["counts"] == m["counts"]
    assert len(m["fingerprint"]) == 64

    seen = []
    for split in ("train", "validation"):
        recs = _records(str(out), split, m)
        assert len(recs) == m["num_examples"][split]
        for shard in m["shards"][split]:
            assert sum(r["shard"] == shard["file"] for r in recs) == shard["num_examples"]
        for r in recs:
            assert (r["height"], r["width"], len(r["raw"])) == (16, 16, 16 * 16 * 3)
            assert m["classes"][r["label"]] == r["path"].split("/")[0]
            assert m["counts"][split][r["path"].split("/")[0]] > 0
        seen += [r["path"] for r in recs]
    assert sorted(seen) == sorted(str(p.relative_to(images)) for p in images.rglob("*.jpg"))
    assert _leftovers(tmp_path) == []


def test_record_pixels_are_pil_rgb_bilinear(images, tmp_path):
    out = tmp_path / "r"
    m = prepare.prepare_tfrecords(str(images), str(out), image_size=20, num_shards=1)
    rec = _records(str(out), "train", m)[0]
    with Image.open(images / rec["path"]) as im:
        expected = im.convert("RGB").resize((20, 20), Image.BILINEAR).tobytes()
    assert rec["raw"] == expected


def test_png_grayscale_and_uppercase_extensions(image_copy, tmp_path):
    Image.fromarray(np.full((30, 40), 77, np.uint8), "L").save(image_copy / "roses" / "GREY.PNG")
    Image.fromarray(np.zeros((10, 10, 4), np.uint8), "RGBA").save(image_copy / "daisy" / "alpha.png")
    (image_copy / "daisy" / "readme.txt").write_text("ignored")
    (image_copy / "LICENSE.txt").write_text("ignored")
    m = prepare.prepare_tfrecords(str(image_copy), str(tmp_path / "o"), 8, num_shards=2)
    assert sum(m["num_examples"].values()) == CLASSES * PER_CLASS + 2
    recs = {r["path"]: r for s in ("train", "validation") for r in _records(str(tmp_path / "o"), s, m)}
    assert recs["roses/GREY.PNG"]["raw"] == bytes([77]) * (8 * 8 * 3)


def test_prepare_is_deterministic_and_idempotent(images, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    ma = prepare.prepare_tfrecords(str(images), str(a), 16, 4, 0.2, seed=3)
    mb = prepare.prepare_tfrecords(str(images), str(b), 16, 4, 0.2, seed=3)
    assert ma == mb and _files(a) == _files(b)
    mtimes = {p: p.stat().st_mtime_ns for p in a.iterdir()}
    assert prepare.prepare_tfrecords(str(images), str(a), 16, 4, 0.2, seed=3) == ma
    assert {p: p.stat().st_mtime_ns for p in a.iterdir()} == mtimes
    # another seed gives another split; re-preparing into the same folder replaces it whole
    mc = prepare.prepare_tfrecords(str(images), str(a), 16, 4, 0.2, seed=4)
    assert mc["fingerprint"] == ma["fingerprint"] and mc["seed"] == 4
    assert json.loads((a / "manifest.json").read_text())["seed"] == 4
    assert _files(a) != _files(b)
    assert _leftovers(tmp_path) == []


def test_adding_an_image_moves_no_other(image_copy, tmp_path):
    before = prepare.prepare_tfrecords(str(image_copy), str(tmp_path / "o"), 12, 4, 0.3)
    where_before = {r["path"]: r["shard"] for s in ("train", "validation")
                    for r in _records(str(tmp_path / "o"), s, before)}
    shutil.copy(image_copy / "roses" / "roses_0001.jpg", image_copy / "roses" / "roses_new.jpg")
    after = prepare.prepare_tfrecords(str(image_copy), str(tmp_path / "o"), 12, 4, 0.3)
    assert after["fingerprint"] != before["fingerprint"]
    assert sum(after["num_examples"].values()) == sum(before["num_examples"].values()) + 1
    where_after = {r["path"]: r["shard"] for s in ("train", "validation")
                   for r in _records(str(tmp_path / "o"), s, after)}
    assert set(where_after) == set(where_before) | {"roses/roses_new.jpg"}
    assert all(where_after[p] == where_before[p] for p in where_before)


# --------------------------------------------------------------------------- bad input

def _expect(image_root, tmp_path, *fragments, **kw):
    out = tmp_path / "out"
    with pytest.raises(ConfigError) as err:
        prepare.prepare_tfrecords(str(image_root), str(out), kw.pop("image_size", 16), **kw)
    text = str(err.value)
    for frag in fragments:
        assert frag in text, f"{frag!r} not in {text!r}"
    assert not out.exists()
    assert _leftovers(tmp_path) == []
    return err.value


def test_missing_folder(tmp_path):
    err = _expect(tmp_path / "nope", tmp_path, "data.path", "does not exist", "<class name>")
    assert len(err.problems) == 1


def test_not_a_directory(tmp_path):
    f = tmp_path / "file.jpg"
    f.write_bytes(b"x")
    _expect(f, tmp_path, "data.path", "is not a directory")


def test_no_class_folders(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "loose.jpg").write_bytes(b"x")
    _expect(tmp_path / "empty", tmp_path, "data.path", "has no class sub-folders")


def test_empty_class_and_single_class(tmp_path, images):
    root = tmp_path / "one"
    shutil.copytree(images / "daisy", root / "daisy")
    _expect(root, tmp_path, "data.path", "only 1 class folder", "at least 2")
    (root / "tulips").mkdir()
    (root / "tulips" / "notes.txt").write_text("no images here")
    err = _expect(root, tmp_path, "class folder 'tulips'", "holds no images")
    assert len(err.problems) == 1


def test_corrupt_images_all_named(image_copy, tmp_path):
    (image_copy / "roses" / "broken.jpg").write_bytes(b"not a jpeg at all")
    good = (image_copy / "daisy" / "daisy_0002.jpg").read_bytes()
    (image_copy / "daisy" / "truncated.jpg").write_bytes(good[: len(good) // 3])
    err = _expect(image_copy, tmp_path, "data.path", "broken.jpg", "truncated.jpg",
                  "cannot be read as an image")
    assert len(err.problems) == 2


def test_bad_parameters_and_structure_listed_together(image_copy, tmp_path):
    (image_copy / "tulips").mkdir()
    (image_copy / "roses" / "bad.png").write_bytes(b"\x89PNG garbage")
    err = _expect(image_copy, tmp_path, "data.num_shards: must be an integer >= 1, got 0",
                  "data.validation_fraction: must be a number in [0, 0.9]", "'tulips'", "bad.png",
                  num_shards=0, validation_fraction=0.95)
    assert len(err.problems) == 4
    err = _expect(tmp_path / "missing", tmp_path, "data.validation_fraction", "got -0.1",
                  "does not exist", validation_fraction=-0.1)
    assert len(err.problems) == 2
    _expect(image_copy, tmp_path, "data.image_size", image_size=0)


def test_out_dir_with_foreign_files_is_refused(images, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "precious.txt").write_text("keep")
    with pytest.raises(ConfigError) as err:
        prepare.prepare_tfrecords(str(images), str(out), 16)
    assert "data.prepared_dir" in str(err.value) and "not a prepared dataset" in str(err.value)
    assert (out / "precious.txt").read_text() == "keep"
    assert _leftovers(tmp_path) == []
    with pytest.raises(ConfigError, match="inside the image folder"):
        prepare.prepare_tfrecords(str(images), str(images / "records"), 16)


def test_failed_rewrite_keeps_previous_dataset(image_copy, tmp_path):
    out = tmp_path / "out"
    first = prepare.prepare_tfrecords(str(image_copy), str(out), 16)
    snapshot = _files(out)
    (image_copy / "roses" / "zz_broken.jpg").write_bytes(b"garbage")  # structure fine, image bad
    with pytest.raises(ConfigError, match="zz_broken.jpg"):
        prepare.prepare_tfrecords(str(image_copy), str(out), 16)
    assert _files(out) == snapshot and json.loads((out / "manifest.json").read_text()) == first
    assert _leftovers(tmp_path) == []


def test_object_store_path_writes_manifest_last_without_temp_files(images):
    import tensorflow as tf

    out = f"ram://prepare-test-{uuid.uuid4().hex[:8]}/records"
    m = prepare.prepare_tfrecords(str(images), out, 16, num_shards=2)
    names = sorted(n.rstrip("/") for n in tf.io.gfile.listdir(out))
    assert names == sorted(["manifest.json", "classes.json", "counts.json",
                            *m["files"]["train"], *m["files"]["validation"]])
    assert prepare.prepare_tfrecords(str(images), out, 16, num_shards=2) == m
    m3 = prepare.prepare_tfrecords(str(images), out, 16, num_shards=3)  # stale shards removed
    names = sorted(n.rstrip("/") for n in tf.io.gfile.listdir(out))
    assert names == sorted(["manifest.json", "classes.json", "counts.json",
                            *m3["files"]["train"], *m3["files"]["validation"]])


def test_object_store_failed_rewrite_keeps_previous_dataset(image_copy):
    import tensorflow as tf

    out = f"ram://prepare-test-{uuid.uuid4().hex[:8]}/records"
    first = prepare.prepare_tfrecords(str(image_copy), out, 16, num_shards=2)
    before = {n: tf.io.gfile.GFile(f"{out}/{n}", "rb").read() for n in tf.io.gfile.listdir(out)}
    (image_copy / "daisy" / "zz_bad.jpg").write_bytes(b"garbage")
    with pytest.raises(ConfigError, match="zz_bad.jpg"):
        prepare.prepare_tfrecords(str(image_copy), out, 16, num_shards=2)
    after = {n: tf.io.gfile.GFile(f"{out}/{n}", "rb").read() for n in tf.io.gfile.listdir(out)}
    assert after == before and json.loads(after["manifest.json"]) == first


def test_only_plain_local_paths_use_directory_rename():
    assert fileio.is_local("/tmp/x") and fileio.is_local("rel/x") and fileio.is_local("file:///tmp/x")
    assert not fileio.is_local("gs://bucket/x")
    assert not fileio.is_local("/gcs/bucket/x")  # GCS FUSE: no atomic directory rename


# --------------------------------------------------------------------------- CLI

def test_cli_missing_folder_exits_2_one_line_per_problem(tmp_path, capsys):
    code = prepare.main(["--images", str(tmp_path / "missing"), "--out", str(tmp_path / "o"),
                         "--shards", "0"])
    captured = capsys.readouterr()
    assert code == 2
    lines = captured.err.strip().splitlines()
    assert len(lines) == 2
    assert any("data.path" in line and "does not exist" in line for line in lines)
    assert any("data.num_shards" in line for line in lines)
    assert "Traceback" not in captured.err and captured.out == ""


def test_cli_synthesize_and_prepare(tmp_path, capsys):
    code = prepare.main(["--synthesize", str(tmp_path / "img"), "--classes", "2", "--per-class", "5",
                         "--image-size", "16", "--out", str(tmp_path / "rec"), "--shards", "2"])
    out = capsys.readouterr().out
    assert code == 0
    assert "daisy" in out and "dandelion" in out and "train-00000-of-00002.tfrecord" in out
    assert (tmp_path / "rec" / "manifest.json").is_file()


def test_progress_is_reported_after_every_shard(images, tmp_path):
    calls = []
    manifest = prepare.prepare_tfrecords(str(images), str(tmp_path / "out"), image_size=16, num_shards=3,
                                         validation_fraction=0.25, seed=1,
                                         progress=lambda *a: calls.append(a))
    shards = len(manifest["files"]["train"]) + len(manifest["files"]["validation"])
    total = sum(manifest["num_examples"].values())
    assert [c[0] for c in calls] == list(range(1, shards + 1))
    assert all(c[1] == shards and c[3] == total for c in calls)
    assert [c[2] for c in calls] == sorted(c[2] for c in calls) and calls[-1][2] == total
