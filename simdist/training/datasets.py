"""Datasets that need no download: seeded synthetic data and small ones shipped in packages.

A dataset registers by name in :data:`DATASETS` with a frozen pydantic config; its factory
``factory(seed, config)`` returns a :class:`Dataset` of float32 features standardised with
the training split's statistics and int64 labels. Everything random (the mixture, the
train/test split) comes from named streams of the run seed, so a seed fixes the data.

A run may hold out a **validation split** of the training set (``workload.validation_split``,
:func:`hold_out_validation`): an algorithm that chooses between replicas (NNT's best worker)
chooses on it, so the test set stays an outcome only. The held-out samples come from the
stream ``"validation-split"`` and leave the training set the sharder divides.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Annotated, Callable

import numpy as np
import torch
from pydantic import BaseModel, Field, ValidationError

from ..config import FROM_LIST, USER_CONFIG
from ..errors import InputError
from ..registry import Registry
from ..seeding import numpy_stream

__all__ = ["DATASETS", "Dataset", "DatasetShape", "dataset_shape", "build_dataset", "SyntheticConfig", "DigitsConfig", "ShapeOnlyConfig",
           "IMAGENET_DECODE_PER_IMAGE_S", "IMAGENET_DECODE_SOURCE", "HeldOut", "VALIDATION_STREAM",
           "validation_split_size", "hold_out_validation"]

DATASETS: Registry[Callable[[int, object], "Dataset"]] = Registry("dataset")


@dataclass(frozen=True)
class Dataset:
    """A classification dataset split into train and test tensors.

    ``train_x``/``test_x`` are float32 with shape ``(n, *input_shape)``; ``train_y``/``test_y``
    are int64 class indices in ``[0, num_classes)``.
    """

    name: str
    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    input_shape: tuple[int, ...]
    num_classes: int
    shape_only: bool = False  # no sample values: usable in timing-only runs alone
    # one sample's load + decode + augment work on one CPU core, s, and its source (None: the samples are
    # tensors in memory, priced by simdist.training.data_loading as indexing them)
    load_per_sample_s: float | None = None
    load_source: str = ""

    @property
    def train_size(self) -> int:
        return int(self.train_y.shape[0])

    @property
    def test_size(self) -> int:
        return int(self.test_y.shape[0])


_DIGITS_SAMPLES = 1797  # scikit-learn's load_digits

_TEST_FRACTION = Field(
    0.2, gt=0.0, lt=1.0, description="Share of the samples held out for testing, in (0, 1). Default 0.2."
)


@dataclass(frozen=True)
class DatasetShape:
    """A dataset's sizes, known from its options before any sample is made (for work estimates)."""

    samples: int  # train plus test
    input_shape: tuple[int, ...]
    classes: int
    test_fraction: float
    holds_values: bool = True  # False: sizes only (labels, no sample values)

    @property
    def train_samples(self) -> int:
        """Samples left for training after the test split (as :func:`_split` cuts it)."""
        if self.test_fraction == 0:
            return self.samples
        return self.samples - min(max(int(round(self.samples * self.test_fraction)), 1), self.samples - 1)


class SyntheticConfig(BaseModel):
    """Options of the ``synthetic`` Gaussian-mixture dataset."""

    model_config = USER_CONFIG

    samples: int = Field(4000, ge=2, le=2**31, description="Total number of samples, train plus test. Default 4000.")
    features: int = Field(32, ge=1, le=2**24, description="Dimension of each sample. Default 32.")
    classes: int = Field(10, ge=2, le=2**20, description="Number of classes. Default 10.")
    separation: float = Field(
        2.0,
        gt=0.0,
        description="Distance scale between class means, in within-class standard deviations: every cluster "
        "mean lies at this distance from the origin, so two means are about sqrt(2) times it apart; "
        "smaller is harder. Default 2.0.",
    )
    clusters_per_class: int = Field(1, ge=1, le=2**10, description="Gaussian clusters making up each class. Default 1.")
    test_fraction: float = _TEST_FRACTION

    def shape(self) -> DatasetShape:
        return DatasetShape(self.samples, (self.features,), self.classes, self.test_fraction)


class DigitsConfig(BaseModel):
    """Options of the ``digits`` dataset."""

    model_config = USER_CONFIG

    test_fraction: float = _TEST_FRACTION

    def shape(self) -> DatasetShape:
        return DatasetShape(_DIGITS_SAMPLES, (1, 8, 8), 10, self.test_fraction)


def _split(n: int, test_fraction: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Train and test indices from a seeded permutation; both splits keep at least one sample."""
    n_test = min(max(int(round(n * test_fraction)), 1), n - 1)
    order = rng.permutation(n)
    return order[n_test:], order[:n_test]


def _standardised(name: str, x: np.ndarray, y: np.ndarray, train: np.ndarray, test: np.ndarray,
                  input_shape: tuple[int, ...], num_classes: int) -> Dataset:
    """Standardise each feature with the training split's mean and std (std 0 → 1)."""
    flat = x.reshape(len(x), -1).astype(np.float64)
    mean = flat[train].mean(axis=0)
    std = flat[train].std(axis=0)
    std[std < 1e-12] = 1.0
    flat = ((flat - mean) / std).astype(np.float32).reshape(len(x), *input_shape)

    def tensors(idx: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.from_numpy(np.ascontiguousarray(flat[idx])), torch.from_numpy(y[idx].astype(np.int64))

    (train_x, train_y), (test_x, test_y) = tensors(train), tensors(test)
    return Dataset(name, train_x, train_y, test_x, test_y, tuple(input_shape), num_classes)


def dataset_shape(name: str, options: dict | None) -> DatasetShape | None:
    """The sizes of dataset ``name`` with ``options``, without making a sample; None where the
    dataset cannot tell (a user's registered dataset without ``shape()``, or invalid options)."""
    entry = DATASETS.entry(name) if name in DATASETS else None
    if entry is None or entry.config is None or not hasattr(entry.config, "shape"):
        return None
    try:
        return entry.config.model_validate(options or {}).shape()
    except ValidationError:
        return None


def build_dataset(name: str, seed: int, config: object) -> Dataset:
    """``DATASETS`` entry ``name``'s ``factory(seed, config)``; this package's own datasets are
    built once per process for each (name, seed, options) and shared after that.

    A sweep builds the same dataset for every point: unpacking and standardising ``digits``
    took about 13 ms a run. A shared dataset's tensors must stay unchanged; one that was
    written in place since (a model writing into its input, say) is built again.
    """
    entry = DATASETS.entry(name)
    if entry.factory.__module__ != __name__:  # a user's dataset may read files that change
        return entry.factory(seed, config)
    key = (name, int(seed), config.model_dump_json() if isinstance(config, BaseModel) else repr(config))
    dataset, versions = _BUILT.pop(key, (None, None))
    if dataset is None or _versions(dataset) != versions:
        dataset = entry.factory(seed, config)
        versions = _versions(dataset)
    _BUILT[key] = (dataset, versions)  # the most recently used last
    while len(_BUILT) > _KEEP_BUILT:  # a sweep over seeds or sizes must not keep every dataset
        del _BUILT[next(iter(_BUILT))]
    return dataset


_BUILT: dict[tuple[str, int, str], tuple[Dataset, tuple[int, ...]]] = {}
_KEEP_BUILT = 4


def _versions(dataset: Dataset) -> tuple[int, ...]:
    """The in-place write counters of a dataset's tensors."""
    return tuple(t._version for t in (dataset.train_x, dataset.train_y, dataset.test_x, dataset.test_y))


# -- the validation split ----------------------------------------------------------------

VALIDATION_STREAM = "validation-split"  # the named stream (simdist.seeding) that picks the held-out samples
VALIDATION_FIELD = "workload.validation_split"


@dataclass(frozen=True)
class HeldOut:
    """Training samples held out for validation: features (empty for a shape-only dataset) and labels."""

    x: torch.Tensor
    y: torch.Tensor

    @property
    def size(self) -> int:
        return int(self.y.shape[0])


def validation_split_size(train_samples: int, fraction: float, workers: int | None = None) -> int:
    """Samples a split of ``fraction`` holds out of ``train_samples``: ``fraction × train_samples``
    rounded half up. An :class:`InputError` naming ``workload.validation_split`` where a positive
    fraction holds out no sample, or (``workers`` given) leaves fewer training samples than workers."""
    held = int(math.floor(fraction * train_samples + 0.5))
    if fraction > 0 and held == 0:
        raise InputError(f"{fraction:g} of {train_samples} training samples holds out no sample; give at least "
                         f"{0.5 / train_samples:.3g} (or 0: no split)", field=VALIDATION_FIELD)
    if workers is not None and held > 0 and train_samples - held < workers:
        raise InputError(f"{fraction:g} holds out {held} of {train_samples} training samples, leaving "
                         f"{train_samples - held} for {workers} workers; give a smaller fraction",
                         field=VALIDATION_FIELD)
    return held


def hold_out_validation(dataset: Dataset, fraction: float, seed: int) -> tuple[Dataset, HeldOut]:
    """``dataset`` without its validation split, and the split: ``validation_split_size`` training
    samples drawn without replacement from stream ``"validation-split"`` of ``seed``.

    Both parts keep the training set's order. A shape-only dataset holds labels only, so only the
    counts change. Features stay standardised with the whole training set's statistics (as the
    dataset was built; an unsupervised per-feature mean and standard deviation, no labels).
    """
    held = validation_split_size(dataset.train_size, fraction)
    if held == 0:
        return dataset, HeldOut(dataset.test_x[:0], dataset.test_y[:0])
    if dataset.shape_only:
        kept = dataset.train_size - held
        return (dataclasses.replace(dataset, train_y=dataset.train_y[:kept]),
                HeldOut(dataset.train_x[:0], dataset.train_y[:held].clone()))
    order = numpy_stream(seed, VALIDATION_STREAM).permutation(dataset.train_size)
    validation = torch.from_numpy(np.sort(order[:held]))
    train = torch.from_numpy(np.sort(order[held:]))
    return (dataclasses.replace(dataset, train_x=dataset.train_x[train], train_y=dataset.train_y[train]),
            HeldOut(dataset.train_x[validation], dataset.train_y[validation]))


@DATASETS.register(
    "synthetic",
    "Seeded Gaussian-mixture classification: each class is one or more unit-variance Gaussian "
    "clusters whose means lie at distance 'separation' from the origin in random directions.",
    config=SyntheticConfig,
)
def synthetic(seed: int, config: SyntheticConfig) -> Dataset:
    rng = numpy_stream(seed, "dataset/synthetic")
    n_clusters = config.classes * config.clusters_per_class
    directions = rng.standard_normal((n_clusters, config.features))
    means = config.separation * directions / np.linalg.norm(directions, axis=1, keepdims=True)
    labels = rng.permutation(np.arange(config.samples) % config.classes)  # balanced classes
    cluster = labels * config.clusters_per_class + rng.integers(0, config.clusters_per_class, config.samples)
    x = means[cluster] + rng.standard_normal((config.samples, config.features))
    train, test = _split(config.samples, config.test_fraction, numpy_stream(seed, "dataset/synthetic/split"))
    return _standardised("synthetic", x, labels, train, test, (config.features,), config.classes)


@DATASETS.register(
    "digits",
    "Handwritten digits 0-9, 1797 8x8 grey images bundled with scikit-learn (no download); "
    "pixels scaled to [0, 1], then standardised per pixel.",
    citation="Alpaydin, Kaynak: Optical Recognition of Handwritten Digits, UCI Machine Learning Repository, 1998.",
    config=DigitsConfig,
)
def digits(seed: int, config: DigitsConfig) -> Dataset:
    from sklearn.datasets import load_digits  # imported here: scikit-learn is slow to import

    bunch = load_digits()
    x = bunch.images.astype(np.float64) / 16.0  # pixel values are 0..16
    train, test = _split(len(x), config.test_fraction, numpy_stream(seed, "dataset/digits/split"))
    return _standardised("digits", x, bunch.target, train, test, (1, 8, 8), 10)


class ShapeOnlyConfig(BaseModel):
    """Options of a shape-only dataset (sizes without values, for timing-only runs)."""

    model_config = USER_CONFIG

    samples: int = Field(1_281_167, ge=1, le=2**40, description="Training samples per epoch. Default: ImageNet-1k's 1,281,167.")
    input_shape: Annotated[tuple[Annotated[int, Field(ge=1, le=2**24)], ...], FROM_LIST] = Field(
        (3, 224, 224), min_length=1, max_length=8, description="Shape of one sample. Default (3, 224, 224).")
    classes: int = Field(1000, ge=2, le=2**20, description="Number of classes. Default 1000.")
    test_samples: int = Field(50_000, ge=0, le=2**40, description=(
        "Samples of the test set: the epoch-end validation pass (workload.validation) costs a forward pass over "
        "them where no validation split is held out (workload.validation_split; NNT's evaluation costs one over "
        "the split), as in replay. Default: ImageNet-1k's 50,000 validation images."))

    def shape(self) -> DatasetShape:
        return DatasetShape(self.samples, tuple(self.input_shape), self.classes, 0.0, holds_values=False)


@DATASETS.register(
    "imagenet-shape",
    "ImageNet-1k's sizes without its images (1,281,167 training samples of 3x224x224, 1000 classes, 50,000 "
    "validation samples): epochs, model shapes and evaluation costs for timing-only runs; holds no sample values. "
    "Loading an image costs 5.2 ms of one core (JPEG decode + augmentation, see IMAGENET_DECODE_SOURCE).",
    citation="Russakovsky et al., ImageNet Large Scale Visual Recognition Challenge, IJCV 115, 2015 (ILSVRC-2012 sizes).",
    config=ShapeOnlyConfig,
)
def imagenet_shape(seed: int, config: ShapeOnlyConfig) -> Dataset:
    empty = torch.empty((0, *config.input_shape))
    labels = torch.zeros(config.samples, dtype=torch.int64)  # sharding needs only the count
    test_labels = torch.zeros(config.test_samples, dtype=torch.int64)  # an evaluation's cost needs only the count
    return Dataset("imagenet-shape", empty, labels, empty, test_labels,
                   tuple(config.input_shape), config.classes, shape_only=True,
                   load_per_sample_s=IMAGENET_DECODE_PER_IMAGE_S, load_source=IMAGENET_DECODE_SOURCE)


# A training image's JPEG read + decode + augmentation on one core. Data-bound ResNet-50 training on one
# A100 with 10 DataLoader worker processes (PIL, timm's ImageNet training transforms) averaged 1923 img/s
# where the GPU alone ran 2600 img/s; 10 cores / 1923 img/s = 5.2 ms per image per core.
IMAGENET_DECODE_PER_IMAGE_S = 10 / 1923
IMAGENET_DECODE_SOURCE = (
    "github.com/huggingface/pytorch-image-models issue #1491 (2022-10-10): ResNet-50, A100, 'train.py -j10' "
    "(10 DataLoader workers, PIL) averaged 1923 img/s, data-bound (benchmark.py without data: 2600 img/s; the "
    "maintainer names the input pipeline); 10 cores / 1923 img/s = 5.2 ms per image per core. For comparison, "
    "tensorpack's 'Efficient DataFlow' tutorial gets 1k-2k img/s from 25 processes with heavier augmentation "
    "(12-25 ms per image per core).")
