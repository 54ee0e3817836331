"""Training replay: the real training math a simulated run performs.

Models (:mod:`.models`) and datasets (:mod:`.datasets`) register by name; :mod:`.data`
shards the training set per epoch; :mod:`.optim` holds update rules on flat tensors;
:mod:`.replica` a worker's parameter copy (and timing-only stand-ins); :mod:`.gradients`
evaluates many workers' gradients in batched calls; :mod:`.workload` ties them together
for one run.
"""

from __future__ import annotations

from .data import Batch, EpochSharder, ShardIterator
from .datasets import DATASETS, Dataset, DigitsConfig, SyntheticConfig, build_dataset
from .gradients import GradientEvaluator, GradientHandle, PendingGradients
from .models import MODELS, CNNConfig, LayerInfo, MLPConfig, ModelInfo, load_import_model, model_info
from .optim import Adam, Optimizer, OptimizerConfig, SGD, make_optimizer
from . import resnet  # noqa: F401  (registers resnet50, resnet18)
from .replica import PhantomReplica, PhantomTensor, Replica, payload_nbytes, snapshot
from .workload import Workload, build_workload

__all__ = [
    "Batch", "EpochSharder", "ShardIterator",
    "DATASETS", "Dataset", "DigitsConfig", "SyntheticConfig", "build_dataset",
    "GradientEvaluator", "GradientHandle", "PendingGradients",
    "MODELS", "CNNConfig", "LayerInfo", "MLPConfig", "ModelInfo", "load_import_model", "model_info",
    "Adam", "Optimizer", "OptimizerConfig", "SGD", "make_optimizer",
    "PhantomReplica", "PhantomTensor", "Replica", "payload_nbytes", "snapshot",
    "Workload", "build_workload",
]
