"""Record the reference PyTorch profiler trace in this folder (CPU, gloo, 2 ranks, DDP).

    python calibration/traces/make_torch_profiler_trace.py [--out calibration/traces/torch_profiler_ddp_gloo_2ranks_rank0.json]

Two processes train a small MLP with DistributedDataParallel over the gloo backend on this
host; rank 0's profiler (schedule wait=1, warmup=1, active=3) exports its Chrome trace. The
trace shows what ``simdist calibrate trace`` reads from real profiler output: ProfilerStep
windows, cpu_op spans, ``c10d::allreduce_`` launches and ``gloo:all_reduce`` spans on the
gloo thread, overlapping backward.
"""

from __future__ import annotations

import argparse
import os
import socket
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ProfilerActivity, profile, schedule

HERE = Path(__file__).resolve().parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(rank: int, world: int, port: int, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=3)) as prof:
        for _ in range(5):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(ddp(x), y).backward()
            optimizer.step()
            prof.step()
    prof.export_chrome_trace(str(Path(out_dir) / f"rank{rank}.json"))
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(HERE / "torch_profiler_ddp_gloo_2ranks_rank0.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_run, args=(2, _free_port(), tmp), nprocs=2)
        Path(args.out).write_bytes((Path(tmp) / "rank0.json").read_bytes())
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
