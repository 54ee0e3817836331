"""Model zoo, model info, datasets and workload building."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from simdist.errors import InputError
from simdist.training import (
    DATASETS,
    MODELS,
    CNNConfig,
    DigitsConfig,
    MLPConfig,
    OptimizerConfig,
    SyntheticConfig,
    build_dataset,
    build_workload,
    load_import_model,
    model_info,
)


def tiny_factory(input_shape, num_classes, width=4):
    """An importable model factory for the import-path tests."""
    flat = math.prod(input_shape)
    return nn.Sequential(nn.Flatten(), nn.Linear(flat, width), nn.ReLU(), nn.Linear(width, num_classes))


# ----------------------------------------------------------------------------- models


def test_zoo_is_registered_with_descriptions_and_configs():
    assert {"mlp", "cnn"} <= set(MODELS.names())
    assert MODELS.entry("mlp").config is MLPConfig
    assert MODELS.entry("cnn").config is CNNConfig
    assert "LeCun" in MODELS.entry("cnn").citation and "1998" in MODELS.entry("cnn").citation
    for entry in MODELS:
        assert entry.description
        for name, field in entry.config.model_fields.items():
            assert field.description and "Default" in field.description, name


@pytest.mark.parametrize("input_shape", [(32,), (1, 8, 8), (3, 5, 7)])
def test_mlp_output_shape(input_shape):
    module = MODELS.get("mlp")(input_shape, 10, MLPConfig(hidden=[16, 8]))
    assert module(torch.zeros(5, *input_shape)).shape == (5, 10)


@pytest.mark.parametrize("input_shape", [(1, 8, 8), (3, 16, 16), (1, 28, 28), (2, 5, 7)])
def test_cnn_fits_small_images(input_shape):
    module = MODELS.get("cnn")(input_shape, 7, CNNConfig())
    assert module(torch.zeros(3, *input_shape)).shape == (3, 7)


def test_cnn_rejects_flat_input():
    with pytest.raises(InputError, match="image input"):
        MODELS.get("cnn")((32,), 10, CNNConfig())


def test_model_configs_are_strict():
    with pytest.raises(ValueError):
        MLPConfig(hidden=[0])
    with pytest.raises(ValueError):
        MLPConfig(width=3)
    with pytest.raises(ValueError):
        CNNConfig(kernel_size=4)
    with pytest.raises(ValueError):
        MLPConfig().hidden = [3]  # frozen


def test_model_info_layout_and_flops_of_mlp():
    module = MODELS.get("mlp")((1, 8, 8), 10, MLPConfig())
    info = model_info(module, (1, 8, 8))
    assert info.param_count == sum(p.numel() for p in module.parameters()) == 64 * 128 + 128 + 128 * 10 + 10
    assert [layer.start for layer in info.layers] == [0] + [layer.stop for layer in info.layers[:-1]]
    assert [layer.forward_flops_per_sample for layer in info.layers] == [2 * 64 * 128, 0, 2 * 128 * 10, 0]
    assert info.forward_flops_per_sample == 2 * (64 * 128 + 128 * 10)
    assert [layer.name for layer in info.layers] == [name for name, _ in module.named_parameters()]


def test_model_info_counts_conv_flops():
    module = MODELS.get("cnn")((1, 8, 8), 10, CNNConfig())
    info = model_info(module, (1, 8, 8))
    conv1, bias1, conv2 = info.layers[:3]
    assert conv1.forward_flops_per_sample == 2 * (6 * 8 * 8) * (1 * 3 * 3)
    assert bias1.forward_flops_per_sample == 0
    assert conv2.forward_flops_per_sample == 2 * (16 * 4 * 4) * (6 * 3 * 3)
    assert info.param_count == info.layers[-1].stop


def test_load_import_model():
    assert load_import_model(f"{__name__}:tiny_factory") is tiny_factory
    for bad in ("no_colon", "simdist_no_such_module:f", "math:no_such_thing", "math:pi"):
        with pytest.raises(InputError):
            load_import_model(bad)


# ----------------------------------------------------------------------------- datasets


def test_synthetic_is_seeded_standardised_and_balanced():
    config = SyntheticConfig(samples=1000, features=8, classes=4)
    a, b, c = (DATASETS.get("synthetic")(seed, config) for seed in (1, 1, 2))
    assert torch.equal(a.train_x, b.train_x) and torch.equal(a.test_y, b.test_y)
    assert not torch.equal(a.train_x, c.train_x)
    assert a.train_x.dtype == torch.float32 and a.train_y.dtype == torch.int64
    assert a.train_x.shape == (800, 8) and a.test_x.shape == (200, 8) and a.input_shape == (8,)
    assert torch.allclose(a.train_x.mean(0), torch.zeros(8), atol=1e-5)
    assert torch.allclose(a.train_x.std(0, unbiased=False), torch.ones(8), atol=1e-4)
    counts = torch.bincount(torch.cat([a.train_y, a.test_y]), minlength=4)
    assert counts.tolist() == [250] * 4


def _nearest_mean_accuracy(data) -> float:
    means = torch.stack([data.train_x[data.train_y == k].mean(0) for k in range(data.num_classes)])
    predicted = torch.cdist(data.test_x, means).argmin(1)
    return float((predicted == data.test_y).float().mean())


def test_synthetic_separation_sets_difficulty():
    easy = DATASETS.get("synthetic")(0, SyntheticConfig(separation=6.0))
    hard = DATASETS.get("synthetic")(0, SyntheticConfig(separation=0.5))
    assert _nearest_mean_accuracy(easy) > 0.95 > 0.5 > _nearest_mean_accuracy(hard)


def test_synthetic_with_several_clusters_per_class():
    data = DATASETS.get("synthetic")(0, SyntheticConfig(samples=300, classes=3, clusters_per_class=4))
    assert set(data.train_y.tolist()) == {0, 1, 2}


def test_digits_shapes_split_and_seed():
    a = DATASETS.get("digits")(0, DigitsConfig())
    b = DATASETS.get("digits")(1, DigitsConfig())
    assert a.train_size + a.test_size == 1797 and a.test_size == round(0.2 * 1797)
    assert a.train_x.shape[1:] == (1, 8, 8) == a.input_shape and a.num_classes == 10
    assert a.train_x.dtype == torch.float32 and a.train_y.dtype == torch.int64
    assert not torch.equal(a.test_y, b.test_y)
    assert abs(float(a.train_x.mean())) < 1e-4


def test_a_built_dataset_is_shared_until_written_in_place():
    first = build_dataset("digits", 3, DigitsConfig())
    assert build_dataset("digits", 3, DigitsConfig()) is first  # a sweep's points share it
    assert build_dataset("digits", 4, DigitsConfig()) is not first
    assert build_dataset("digits", 3, DigitsConfig(test_fraction=0.3)) is not first
    clean = first.test_x.clone()
    first.test_x[:2].mul_(0)  # a model writing into its input, through a view
    rebuilt = build_dataset("digits", 3, DigitsConfig())
    assert rebuilt is not first and torch.equal(rebuilt.test_x, clean)
    for seed in range(10, 20):  # only the most recently used few are kept
        build_dataset("digits", seed, DigitsConfig())
    assert build_dataset("digits", 19, DigitsConfig()) is build_dataset("digits", 19, DigitsConfig())
    assert build_dataset("digits", 3, DigitsConfig()) is not rebuilt


def test_a_users_dataset_is_built_every_time():
    calls = []

    def counting(seed, config):
        calls.append(seed)
        return DATASETS.get("synthetic")(seed, SyntheticConfig())

    DATASETS.add("counting-test", counting, "counts its builds")
    try:
        build_dataset("counting-test", 0, None)
        build_dataset("counting-test", 0, None)
    finally:
        DATASETS._entries.pop("counting-test")
    assert calls == [0, 0]


def test_dataset_configs_are_strict():
    for bad in ({"test_fraction": 0.0}, {"test_fraction": 1.0}, {"size": 3}):
        with pytest.raises(ValueError):
            DigitsConfig(**bad)
    with pytest.raises(ValueError):
        SyntheticConfig(classes=1)


# ----------------------------------------------------------------------------- workload


def _workload(model="mlp", options=None, dataset="digits", **kwargs):
    return build_workload(model, options or {}, dataset, {}, OptimizerConfig(), seed=3, **kwargs)


def test_workload_initial_params_are_seeded_and_shared():
    a, b = _workload(), _workload()
    assert torch.equal(a.initial_params(), b.initial_params())
    p = a.initial_params()
    p.add_(1.0)
    assert not torch.equal(p, a.initial_params())  # a fresh copy every call
    other = build_workload("mlp", {}, "digits", {}, OptimizerConfig(), seed=4)
    assert not torch.equal(a.initial_params(), other.initial_params())
    assert a.param_count == a.initial_params().numel() == a.layers[-1].stop
    assert a.param_bytes() == 4 * a.param_count and a.param_bytes(torch.bfloat16) == 2 * a.param_count
    assert a.forward_flops_per_sample == 2 * (64 * 128 + 128 * 10)


def test_workload_batches_and_metrics():
    w = _workload("cnn")
    sharder = w.sharder(4)
    from simdist.training import ShardIterator

    batch = ShardIterator(sharder, 1).next_batch(16)
    x, y = w.batch_tensors(batch)
    assert x.shape == (16, 1, 8, 8) and y.shape == (16,)
    assert torch.equal(x, w.dataset.train_x[torch.from_numpy(batch.indices.copy())])
    loss, accuracy = w.test_metrics(w.initial_params())
    assert loss > 0 and 0.0 <= accuracy <= 1.0
    replica = w.new_replica()
    assert torch.equal(replica.params, w.initial_params())


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"options": {"hidden": [-1]}}, "workload.model.hidden"),
        ({"options": {"widht": 3}}, "workload.model.widht"),
        ({"model": "mpl"}, "workload.model"),
        ({"dataset": "mnist"}, "workload.dataset"),
    ],
)
def test_workload_errors_name_the_field(kwargs, field):
    with pytest.raises(InputError) as err:
        _workload(**kwargs)
    assert err.value.field == field
    assert "\n" not in str(err.value)


def test_import_models_need_permission():
    path = f"{__name__}:tiny_factory"
    with pytest.raises(InputError, match="allow_code_import: true"):
        _workload(path, {"width": 5})
    w = _workload(path, {"width": 5}, allow_import=True)
    assert w.param_count == 64 * 5 + 5 + 5 * 10 + 10
    with pytest.raises(InputError, match="rejected its options"):
        _workload(path, {"depth": 5}, allow_import=True)
    assert np.isfinite(w.test_metrics(w.initial_params())[0])


def test_resnet50_has_the_published_parameter_count_and_shape_only_imagenet():
    from simdist.training.optim import OptimizerConfig
    from simdist.training.workload import build_workload

    workload = build_workload("resnet50", {}, "imagenet-shape", {}, OptimizerConfig(), 0)
    assert workload.param_count == 25_557_032  # torchvision resnet50, 1000 classes
    assert workload.dataset.shape_only and workload.dataset.train_size == 1_281_167
    assert workload.forward_flops_per_sample == pytest.approx(8.18e9, rel=0.01)  # 4.09 GMACs
    assert sum(layer.stop - layer.start for layer in workload.layers) == workload.param_count


def test_shape_only_dataset_requires_timing_only():
    from simdist.errors import InputError
    from simdist.scenario import scenario_from_dict
    from simdist.simulate import simulate

    data = {"platform": {"preset": "laptop-cpu", "node": {"devices": 1}},
            "workload": {"model": "mlp", "dataset": {"name": "imagenet-shape", "samples": 100,
                                                     "input_shape": [3, 32, 32]}},
            "algorithm": "sync", "stop": {"steps": 1}}
    with pytest.raises(InputError, match="workload.dataset.*timing_only"):
        simulate(scenario_from_dict(data))
