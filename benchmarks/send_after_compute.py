"""What a message call costs right after a forward/backward, against the same call back to back.

Two ranks under ``mpiexec`` (launched by this script); rank 0 sends rank 1 a parameter-server
push through simdist's MPI runtime (a dict holding a float32 gradient of ``--params`` values, as
``rt.send`` sends it), rank 1 answers with a few bytes, ``--sends`` times per condition, and the
median time of rank 0's send call is printed per condition:

* ``back to back``: nothing between the sends (what a microbenchmark times);
* ``after a cache-sized write``: rank 0 first writes twice its largest cache
  (:func:`simdist.calibrate.sweep_timing.cache_evictor`, what ``simdist calibrate network`` does
  before its cold calls);
* ``after a forward/backward``: rank 0 first runs a forward/backward of a 64-256-256-10 MLP on a
  batch of ``--batch`` (the predictive validation's 256x256 model);
* ``8 B after a cache-sized write``: an 8-byte payload after the write: how much of the cost
  belongs to the call rather than to its bytes.

Each line also gives its ratio to the back-to-back median. One thread per rank, as simdist's
real runs use (``OMP_NUM_THREADS=1``).

    python benchmarks/send_after_compute.py [--sends 60] [--params 85002] [--batch 2048]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

CONDITIONS = ("back to back", "after a cache-sized write", "after a forward/backward", "8 B after a cache-sized write")


def worker(args: argparse.Namespace) -> None:
    """One rank's part (run under mpiexec): rank 0 prints the medians as JSON."""
    import time

    import numpy as np
    import torch
    from mpi4py import MPI

    from simdist.calibrate.runtime_sweep import RuntimePath
    from simdist.calibrate.sweep_timing import cache_evictor

    torch.set_num_threads(1)
    torch.manual_seed(0)
    comm = MPI.COMM_WORLD
    path = RuntimePath(comm)
    rt, driver, rank = path.rt, path.driver, comm.Get_rank()
    grad = torch.randn(args.params)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                torch.nn.ReLU(), torch.nn.Linear(256, 10))
    inputs, labels = torch.randn(args.batch, 64), torch.randint(0, 10, (args.batch,))
    evict = cache_evictor()

    def forward_backward() -> None:
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(inputs), labels).backward()

    before = {CONDITIONS[0]: None, CONDITIONS[1]: evict, CONDITIONS[2]: forward_backward, CONDITIONS[3]: evict}
    medians = {}
    for condition, prepare in before.items():
        tensor = torch.zeros(2, dtype=torch.float32) if condition.startswith("8 B") else grad
        times = []
        for step in range(args.sends):
            if rank == 0:
                if prepare is not None:
                    prepare()
                payload = {"grad": tensor, "step": step, "batch_size": args.batch, "loss": 0.5}
                start = time.perf_counter()
                rt.send(1, payload, 5)
                times.append(time.perf_counter() - start)
                driver.wait(rt.recv(1, 6))
            else:
                driver.wait(rt.recv(0, 5))
                rt.send(0, 1, 6)
            path.forget()
        medians[condition] = float(np.median(times)) if times else None
    if rank == 0:
        print(json.dumps({"medians_s": medians, "bytes": int(grad.numel() * 4)}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sends", type=int, default=60, help="sends per condition (median kept)")
    parser.add_argument("--params", type=int, default=85002, help="float32 values in the pushed gradient")
    parser.add_argument("--batch", type=int, default=2048, help="batch of the forward/backward before a send")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sends < 1 or args.params < 1 or args.batch < 1:
        parser.error("--sends, --params and --batch must be at least 1")
    if args.worker:
        worker(args)
        return 0
    mpiexec = shutil.which("mpiexec")
    if mpiexec is None:
        print("send_after_compute: needs mpiexec on PATH (pip install 'simdist[mpi]')", file=sys.stderr)
        return 2
    argv = [mpiexec, "-n", "2", sys.executable, str(Path(__file__).resolve()), "--worker", "--sends", str(args.sends),
            "--params", str(args.params), "--batch", str(args.batch)]
    done = subprocess.run(argv, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        print(f"send_after_compute: the MPI run failed (exit {done.returncode}): "
              f"{(done.stderr.strip().splitlines() or [''])[-1]}", file=sys.stderr)
        return 1
    result = json.loads(lines[-1])
    medians, base = result["medians_s"], result["medians_s"][CONDITIONS[0]]
    print(f"rank 0's send call through simdist's runtime, {result['bytes']:,} B gradient in a dict, "
          f"median of {args.sends}; 2 ranks, 1 thread each")
    for condition in CONDITIONS:
        print(f"  {condition:32s} {medians[condition] * 1e6:8.1f} us   x{medians[condition] / base:5.2f} of back to back")
    return 0


if __name__ == "__main__":
    sys.exit(main())
