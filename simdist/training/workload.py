"""The workload: what is trained (model, dataset, optimizer), built once per run.

:func:`build_workload` turns a scenario's ``workload`` section (names plus option dicts)
into a :class:`Workload`, validating the options with the registered config classes and
naming the offending field (``workload.model.hidden``). The workload is what runtimes and
algorithms touch for the training math: the initial parameters every worker starts from,
replicas, mini-batch tensors, batched gradients (:attr:`Workload.pending`), test
metrics and, where the scenario holds one out (``workload.validation_split``), the
validation split's metrics: an algorithm that chooses between replicas chooses on the
validation split, so the test accuracy a run reports is an outcome only. It also carries
what timing-only mode and the compute model need: parameter count, per-layer layout and
forward FLOPs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pydantic
import torch
from torch import nn

from ..config import describe_validation_error
from ..errors import InputError
from ..seeding import derive_seed
from .data import Batch, EpochSharder
from .datasets import DATASETS, Dataset, HeldOut, build_dataset, hold_out_validation
from .gradients import GradientEvaluator, PendingGradients
from .models import MODELS, LayerInfo, ModelInfo, load_import_model, model_info
from .optim import OptimizerConfig, make_optimizer
from .replica import Replica

__all__ = ["Workload", "build_workload", "check_workload_options"]


class Workload:
    """A built model + dataset + optimizer; use :func:`build_workload` to make one.

    ``module`` belongs to ``evaluator``: its parameters are views of the evaluator's flat
    buffer and hold whichever vector was evaluated last, so read parameters from
    :meth:`initial_params` or replicas, never from the module.
    """

    def __init__(self, model_name: str, model_config: Any, dataset: Dataset, module: nn.Module,
                 info: ModelInfo, evaluator: GradientEvaluator, optimizer_config: OptimizerConfig, seed: int,
                 validation: HeldOut | None = None):
        self.model_name = model_name
        self.model_config = model_config
        self.dataset = dataset  # its training set is what remains after the validation split
        self.validation = validation if validation is not None else HeldOut(dataset.test_x[:0], dataset.test_y[:0])
        self.module = module
        self.info = info
        self.evaluator = evaluator
        self.optimizer_config = optimizer_config
        self.optimizer = make_optimizer(optimizer_config)
        self.seed = seed
        self.pending = PendingGradients(evaluator, gather=self.many_batch_tensors)
        self._initial = torch.cat([p.detach().reshape(-1) for p in module.parameters()]).float()

    # ------------------------------------------------------------------ model facts

    @property
    def param_count(self) -> int:
        return self.info.param_count

    def param_bytes(self, dtype: torch.dtype = torch.float32) -> int:
        """Bytes of one full parameter (or gradient) vector in ``dtype``."""
        return self.info.param_count * torch.empty((), dtype=dtype).element_size()

    @property
    def layers(self) -> tuple[LayerInfo, ...]:
        return self.info.layers

    @property
    def forward_flops_per_sample(self) -> float:
        return self.info.forward_flops_per_sample

    # ------------------------------------------------------------------ training state

    def initial_params(self) -> torch.Tensor:
        """A fresh copy of the initial flat parameters (the same for every worker)."""
        return self._initial.clone()

    def new_replica(self, params: torch.Tensor | None = None) -> Replica:
        """A replica starting at ``params`` (copied) or at the initial parameters."""
        return Replica(self.initial_params() if params is None else params.detach().clone().float(), self.optimizer)

    def sharder(self, n_workers: int) -> EpochSharder:
        """Per-epoch sharding of the training set among ``n_workers`` workers."""
        return EpochSharder(self.dataset.train_size, n_workers, self.seed)

    def batch_tensors(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Features and labels of ``batch``'s training samples.

        ``index_select``, not advanced indexing: the same tensors, gathered row by row with one
        copy each (about 5x faster for a batch of 2,048 rows of 64 floats on one core), and the
        very operation ``calibrate compute`` times as the ``gather`` op that prices it.
        """
        index = torch.from_numpy(batch.indices.astype(np.int64))  # a writable copy: shards are read-only
        return self.dataset.train_x.index_select(0, index), self.dataset.train_y.index_select(0, index)

    def many_batch_tensors(self, batches: list[Batch]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """``batch_tensors`` of every batch, gathered with one indexing of the training set
        (each batch's tensors are views of the gathered ones)."""
        index = torch.from_numpy(np.concatenate([batch.indices for batch in batches]))
        sizes = [len(batch.indices) for batch in batches]
        xs = self.dataset.train_x.index_select(0, index).split(sizes)
        return list(zip(xs, self.dataset.train_y.index_select(0, index).split(sizes)))

    def test_samples(self, max_samples: int | None = None) -> int:
        """How many test samples an evaluation with ``max_samples`` uses (all by default)."""
        return len(self.dataset.test_y) if max_samples is None else min(max_samples, len(self.dataset.test_y))

    def test_metrics(self, params: torch.Tensor, max_samples: int | None = None) -> tuple[float, float]:
        """(mean test loss, test accuracy) of ``params`` on the first ``max_samples`` test samples (default all)."""
        n = self.test_samples(max_samples)
        return self.evaluator.evaluate(params, self.dataset.test_x[:n], self.dataset.test_y[:n])

    @property
    def validation_size(self) -> int:
        """Samples in the validation split (0: none held out)."""
        return self.validation.size

    def validation_samples(self, max_samples: int | None = None) -> int:
        """How many validation samples an evaluation with ``max_samples`` uses (all by default)."""
        return self.validation.size if max_samples is None else min(max_samples, self.validation.size)

    def validation_metrics(self, params: torch.Tensor, max_samples: int | None = None) -> tuple[float, float]:
        """(mean loss, accuracy) of ``params`` on the first ``max_samples`` validation samples (default all)."""
        n = self.validation_samples(max_samples)
        if n == 0:
            raise ValueError("the workload holds out no validation split (workload.validation_split)")
        return self.evaluator.evaluate(params, self.validation.x[:n], self.validation.y[:n])

    def held_out(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Features and labels a job's validation pass evaluates: the validation split if there is
        one, else the test set (features are empty for a shape-only dataset)."""
        if self.validation.size:
            return self.validation.x, self.validation.y
        return self.dataset.test_x, self.dataset.test_y

    @property
    def held_out_size(self) -> int:
        """Samples of :meth:`held_out`."""
        return int(self.held_out()[1].shape[0])


def _validated(config_cls: type[pydantic.BaseModel], options: dict | None, field: str) -> pydantic.BaseModel:
    """``config_cls(**options)`` or an :class:`InputError` naming the first bad field."""
    try:
        return config_cls.model_validate(options or {})
    except pydantic.ValidationError as err:
        where, message = describe_validation_error(err)
        if err.errors()[0]["type"] == "extra_forbidden":
            message = f"unknown option; allowed: {', '.join(config_cls.model_fields)}"
        raise InputError(message, field=f"{field}.{where}" if where else field) from None


def _build_module(model: str, options: dict | None, dataset: Dataset, allow_import: bool) -> tuple[nn.Module, Any]:
    """The model's module and its validated config (an options dict for imported models)."""
    if ":" in model:
        if not allow_import:
            raise InputError(
                f"model {model!r} is an import path and importing runs code; "
                "the scenario must set `workload.allow_code_import: true` to allow it",
                field="workload.model",
            )
        factory = load_import_model(model)
        config: Any = dict(options or {})
        try:
            module = factory(input_shape=dataset.input_shape, num_classes=dataset.num_classes, **config)
        except TypeError as err:
            raise InputError(f"model factory {model!r} rejected its options: {err}", field="workload.model") from None
        if not isinstance(module, nn.Module):
            raise InputError(f"model factory {model!r} returned {type(module).__name__}, not a torch.nn.Module",
                             field="workload.model")
        return module, config
    entry, config = _entry_and_config(MODELS, model, options, "workload.model")
    return entry.factory(dataset.input_shape, dataset.num_classes, config), config


def _entry_and_config(registry, name: str, options: dict | None, field: str) -> tuple[Any, Any]:
    """Registry entry ``name`` and its validated options (an InputError located under ``field``)."""
    try:
        entry = registry.entry(name)
    except InputError as err:
        raise err.at(field_prefix=field) from None
    return entry, (_validated(entry.config, options, field) if entry.config else None)


def check_workload_options(model: str, model_options: dict | None, dataset: str,
                           dataset_options: dict | None) -> None:
    """Validate the model's and the dataset's options without building either (scenario load time):
    a sweep or comparison then refuses a bad point before running any."""
    _entry_and_config(DATASETS, dataset, dataset_options, "workload.dataset")
    if ":" not in model:  # an import path's options are the factory's keyword arguments
        _entry_and_config(MODELS, model, model_options, "workload.model")


def build_workload(model: str, model_options: dict | None, dataset: str, dataset_options: dict | None,
                   optimizer: OptimizerConfig, seed: int, allow_import: bool = False,
                   validation_split: float = 0.0) -> Workload:
    """Build the workload a scenario names; the model's initial weights come from stream "model-init".

    ``model`` is a registered name or, with ``allow_import``, ``"package.module:factory"``
    called as ``factory(input_shape=..., num_classes=..., **model_options)``.
    ``validation_split``: the fraction of the training set held out for validation
    (:func:`~.datasets.hold_out_validation`; 0: none).
    """
    _, data_config = _entry_and_config(DATASETS, dataset, dataset_options, "workload.dataset")
    data, validation = hold_out_validation(build_dataset(dataset, seed, data_config), validation_split, seed)
    with torch.random.fork_rng(devices=[]):  # module init draws from torch's global generator
        torch.manual_seed(derive_seed(seed, "model-init"))
        module, config = _build_module(model, model_options, data, allow_import)
    info = model_info(module, data.input_shape)
    return Workload(model, config, data, module, info, GradientEvaluator(module, info), optimizer, seed, validation)
