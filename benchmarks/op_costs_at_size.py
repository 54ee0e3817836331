"""What an algorithm's own arithmetic costs, timed four ways, for one scenario's model.

    python benchmarks/op_costs_at_size.py [--scenario scenarios/quickstart.yaml] [--budget-s 0.2]

``simdist calibrate compute`` times the ops (update, average, compensate, copy, cast, gather,
save) on 4 Mi-parameter vectors by default; with ``--scenario`` it times them at the scenario's
own sizes, with its optimizer and batch fetch, each call after one training step of the
scenario (:mod:`simdist.calibrate.op_profile`). This script prints, per op, the microseconds
one call takes for the scenario's model each way, and the ratio of what ``--scenario`` writes
to the default:

* ``default``: the 4 Mi vectors' seconds per parameter times the model's parameters (what a
  profile measured without ``--scenario`` charges this model);
* ``back to back``: the scenario's sizes, calls timed one after another (caches warm);
* ``after flush``: the same after writing twice the largest cache before every call (cold);
* ``after step``: the same after one training step of the scenario before every call, the
  work a run does between two updates (what ``--scenario`` writes).

Compare with a real run's ledger (``simdist validate`` writes ``validation_ledger.csv``;
reports/validation.md has them): on the development host the MLP 64-256-256-10 (85,002
parameters, SGD with momentum, batch 2,048) updated in 85 µs inside a real run.
"""

from __future__ import annotations

import argparse
import time

import torch

from simdist.calibrate.compute_profile import torch_threads
from simdist.calibrate.compute_scenario import plan_scenario
from simdist.calibrate.op_profile import DEFAULT_OP_PARAMS, measure_ops, measure_scenario_ops
from simdist.calibrate.timed_steps import cpu_training_step
from simdist.training.data_loading import LABEL_ELEMENTS


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", default="scenarios/quickstart.yaml")
    parser.add_argument("--budget-s", type=float, default=0.2, help="timing budget per op and way (default 0.2)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1, as calibrate compute)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    target = plan_scenario(args.scenario, "cpu")
    workload, batch = target.workload, target.scenario.workload.batch_size
    params = int(workload.param_count)
    with torch_threads(args.threads):
        default = measure_ops(DEFAULT_OP_PARAMS, budget_s=args.budget_s)
        ways = {name: measure_scenario_ops(workload, batch, budget_s=args.budget_s, between=between)[0]
                for name, between in (("back to back", (lambda: None, "nothing")), ("after flush", None),
                                      ("after step", (cpu_training_step(workload, batch), "a training step")))}
    print(f"{args.scenario}: {params:,} parameters, batch {batch}, optimizer {workload.optimizer_config.name}, "
          f"{args.threads} torch thread(s)")
    print(f"  {'op':<11}{'default us':>12}" + "".join(f"{name + ' us':>17}" for name in ways) + f"{'step/default':>14}")
    for op in default:
        elements = _elements(op, params, workload, batch)
        us = [1e6 * table[op] * elements for table in (default, *ways.values())]
        print(f"  {op:<11}{us[0]:12.1f}" + "".join(f"{u:17.1f}" for u in us[1:]) + f"{us[-1] / us[0]:14.2f}")
    print(f"  ({time.perf_counter() - started:.1f} s; 'average' is per input buffer; 'gather' per batch fetched)")
    return 0


def _elements(op: str, params: int, workload, batch: int) -> int:
    """What one call works on: the batch's gathered elements for ``gather`` (a dataset with values),
    else the parameters."""
    if op == "gather" and isinstance(getattr(workload.dataset, "train_x", None), torch.Tensor):
        x = workload.dataset.train_x
        return batch * (x[0].numel() + LABEL_ELEMENTS)
    return params


if __name__ == "__main__":
    raise SystemExit(main())
