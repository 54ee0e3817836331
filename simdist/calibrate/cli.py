"""``simdist calibrate compute|network|trace|cpu-share``: measurements → calibration files.

    simdist calibrate compute   [--device cpu|cuda|auto] [--threads N] [--models mlp,cnn | --scenario S.yaml]
                                [--out PROFILE.yaml]
    simdist calibrate network   [--ranks 2] [--out calibration/platforms/host-shm.yaml] [--max-size 4MiB] [--path mpi|runtime]
    simdist calibrate trace     FILE... [--format auto] [--out OVERLAY.yaml] [--summary SUMMARY.yaml]
    simdist calibrate cpu-share [--ranks 1,2,4] [--cores 1,2] [--scenario S.yaml] [--out calibration/cpu_share/host-cpu.yaml]
    simdist calibrate noise     FILE... [--format auto] [--out OVERLAY.yaml] [--ranks-per-node N] (noise_fit.py)

:func:`add_calibrate_parser` adds the ``calibrate`` command to the main parser's
sub-commands; each sub-command sets ``func`` to a handler ``(args) -> int``. Handlers raise
:class:`~simdist.errors.InputError` for bad input (one line; the main CLI prints it and
exits 2). Every file written records its provenance (:mod:`simdist.calibrate.provenance`),
including the full command line that regenerates it.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any, Sequence

from ..argtypes import int_between, positive_float
from ..errors import InputError
from ..units import format_bytes, format_time
from .cli_common import option_ints, option_size, print_size_table, signed_percent, table_note
from .provenance import calibrate_command

__all__ = ["add_calibrate_parser", "main"]


# -- compute ------------------------------------------------------------------------------

def _cmd_compute(args: argparse.Namespace) -> int:
    from .compute_options import DEFAULT_BATCH_SIZES, ZOO
    from .compute_profile import report_lines, run
    from .provenance import check_output

    if not args.scenario:  # the zoo's defaults, spelled out in the command the provenance records
        args.models = args.models or ",".join(ZOO)
        args.batch_sizes = args.batch_sizes or ",".join(map(str, DEFAULT_BATCH_SIZES))
    if args.out:
        check_output(args.out)  # before measuring; the default path depends on the device found
    try:
        path, document = run(args, calibrate_command(args, "compute"))
    except InputError:
        raise
    except ValueError as exc:
        raise InputError(str(exc), source="simdist calibrate compute") from None
    print(f"wrote {path} ({document['description']}, timer {document['timer']})")
    print(f"{'model':<6} {'t0':>10} {'t1/sample':>10} {'r2':>7} {'max err':>8}")
    for name, m in document["models"].items():
        print(f"{name:<6} {format_time(m['t0_s']):>10} {format_time(m['t1_s']):>10} {m['r2']:>7.4f} "
              f"{signed_percent(m['max_relative_error']):>8}")
    print("\n".join(report_lines(path, document)))
    return 0


# -- network ------------------------------------------------------------------------------

def _cmd_network(args: argparse.Namespace) -> int:
    from .mpi_worker import DEFAULT_SIZES
    from .network import (after_step_lines, call_cost_lines, find_mpiexec, fit_sweep, measure_reduce_bandwidth,
                          network_overlay, run_sweep)
    from .overlay import check_link_kind, write_overlay
    from .provenance import check_output

    if args.ranks < 2:
        raise InputError("need at least 2 ranks", source="--ranks")
    check_output(args.out)
    check_link_kind(args.intra_kind, "--intra-kind")
    check_link_kind(args.nic_kind, "--nic-kind")
    max_size = option_size(args.max_size, "--max-size")
    large = option_size(args.large_from, "--large-from")
    sizes = [s for s in DEFAULT_SIZES if s <= max_size] if args.sizes is None else \
        sorted({int(option_size(s, "--sizes")) for s in args.sizes.split(",") if s.strip()})
    if sum(1 for s in sizes if s >= large) < 2:
        raise InputError(f"the sweep needs at least two sizes >= --large-from ({format_bytes(large)})", source="--sizes")
    if args.after_compute is not None:  # checked here: a bad scenario is one line, not a failed mpiexec
        from .compute_scenario import plan_scenario

        plan_scenario(args.after_compute, "cpu")
    mpiexec = find_mpiexec()
    document = run_sweep(args.ranks, sizes, args.budget_s, args.batches, not args.no_allreduce, args.timeout_s,
                         mpiexec, shlex.split(args.mpiexec_args or ""), path=args.path, after_compute=args.after_compute)
    links = fit_sweep(document, large_message_bytes=large, intra_kind=args.intra_kind, nic_kind=args.nic_kind)
    overlay = network_overlay(document, links, calibrate_command(args, "network"), measure_reduce_bandwidth())
    write_overlay(args.out, overlay)
    print(f"MPI sweep: {document['ranks']} ranks on {len(set(document['hosts']))} host(s), {document['mpi_library']}, "
          f"{document['elapsed_s']:.1f} s")
    for link in links:
        print(f"\nnode.{link.field} ({link.kind}): latency {format_time(link.latency_s)}, bandwidth "
              f"{link.bandwidth_Bps / 1e9:.3g} GB/s  [{link.basis}]")
        print_size_table(link.table, ("piecewise", "link"))
    for table in overlay.get("collectives", {}).get("tables", []):
        print(f"\n{table_note(table)}")
    for line in after_step_lines(overlay) + call_cost_lines(overlay):
        print(line)
    print(f"\nwrote {args.out}")
    return 0


# -- trace --------------------------------------------------------------------------------

def _cmd_trace(args: argparse.Namespace) -> int:
    from .overlay import build_overlay, check_link_kind, write_overlay
    from .provenance import check_output, make_provenance, rounded, write_yaml
    from .cost_tables import collectives_section, tables_from_parsed
    from .trace_fit import TRACE_FITTERS, TraceOptions, TraceReport, fit_trace
    from .traces import parse_trace

    for path in (args.out, args.summary):
        if path:
            check_output(path)
    for option, kind in (("--intra-kind", args.intra_kind), ("--nic-kind", args.nic_kind)):
        if kind is not None:
            check_link_kind(kind, option)
    options = TraceOptions(link_size_bytes=option_size(args.link_size, "--link-size"),
                           large_message_bytes=option_size(args.large_from, "--large-from"),
                           max_segments=args.max_segments, tolerance=args.tolerance, intra_kind=args.intra_kind,
                           nic_kind=args.nic_kind, link_class=args.link_class, osu_ranks=args.osu_ranks)
    reports, tables = [], []
    for path in args.files:
        parsed = parse_trace(path, args.format)
        if args.ranks is not None:
            _check_ranks(parsed, args.ranks)
        found, notes = tables_from_parsed(parsed, osu_ranks=args.ranks or args.osu_ranks)
        try:
            report = fit_trace(parsed, options) if parsed.format in TRACE_FITTERS else None
        except ValueError as exc:
            raise InputError(f"cannot fit: {exc}", source=path) from None
        if report is None:
            report = TraceReport(parsed, parsed.table, {}, {})
        report.notes.extend(notes)
        report.notes.extend(table_note(t) for t in found)
        reports.append(report)
        tables.extend(found)
    for report in reports:
        _print_report(report)
    command = calibrate_command(args, "trace", positional=("files",))
    if args.out:
        links = [link for r in reports for link in r.links]
        gap_s = _streaming(reports, links, args.bibw_limit)
        node_fields: dict[str, Any] = {}
        for r in reports:
            node_fields.update(r.node_fields)
        messages = next((link.messages for link in links if link.messages), None)
        if gap_s and links:
            messages = {**(messages or {"source": ""}), "gap": gap_s}
            messages["source"] = "; ".join(filter(None, [messages["source"], "osu_bw: time per message of its "
                                                                             "smallest size"]))
        overlay = build_overlay(links, command=command, inputs=args.files, node_fields=node_fields,
                                collectives=collectives_section(tables) if tables else None, messages=messages)
        write_overlay(args.out, overlay)
        print(f"\nwrote {args.out}")
    if args.summary:
        files = [{"path": r.parsed.path, "format": r.parsed.format, "kind": r.parsed.kind,
                  "description": r.parsed.description,
                  "meta": {k: v for k, v in r.parsed.meta.items() if k != "compute_spans"},
                  "fit": r.fit, "notes": r.notes, "table": r.table.to_dict(orient="records")} for r in reports]
        scores = {r.parsed.path: r.scores for r in reports}
        write_yaml(args.summary, rounded({"files": files, "provenance": make_provenance(command, args.files, scores)}),
                   f"Trace summary written by simdist calibrate trace.\nGenerated by: {command}\nDo not hand-edit.")
        print(f"wrote {args.summary}")
    return 0


def _streaming(reports, links, bibw_limit: str) -> float | None:
    """Apply osu_bw/osu_bibw to the point-to-point links fitted in the same run; the LogGP gap if measured."""
    from .overlay import apply_streaming

    def of(kind: str):
        return next((r for r in reports if r.parsed.format == "osu" and r.parsed.kind == kind), None)

    bw, bibw = of("p2p_bw"), of("p2p_bibw")
    gap_s = float(bw.parsed.table["time_s"].iloc[0]) if bw is not None and len(bw.parsed.table) else None
    p2p = [link for link in links if "large_messages" in link.details]
    for note in apply_streaming(p2p, bw.fit.get("peak_bandwidth_Bps") if bw else None,
                                bibw.fit.get("peak_bandwidth_Bps") if bibw else None, gap_s, bibw_limit):
        print(f"note: {note}")
    return gap_s if p2p else None


def _check_ranks(parsed, ranks: int) -> None:
    """Refuse a collective file whose own rank count is not ``--ranks``."""
    from .collective_csv import check_ranks

    if parsed.format == "collective-csv":
        check_ranks(parsed, ranks)
    elif parsed.format == "nccl-tests" and parsed.meta.get("n_ranks") not in (None, ranks):
        raise InputError(f"the file shows {parsed.meta['n_ranks']} ranks but --ranks says {ranks}", source=parsed.path)


def _print_report(report) -> None:
    print(f"\n{report.parsed.path}: {report.parsed.description}")
    table = report.table
    if "size_bytes" in table.columns and "measured_s" in table.columns:
        predictions = [c[:-2] for c in table.columns if c.endswith("_s") and c != "measured_s"]
        print_size_table(table.to_dict(orient="records"), predictions)
    elif len(table):
        import pandas as pd

        with pd.option_context("display.width", 160, "display.max_columns", 20, "display.float_format", "{:.4g}".format):
            print(table.to_string(index=False))
    for link in report.links:
        print(f"-> node.{link.field} ({link.kind}): latency {format_time(link.latency_s)}, bandwidth "
              f"{link.bandwidth_Bps / 1e9:.4g} GB/s  [{link.basis}]")
    for note in report.notes:
        print(f"note: {note}")


# -- cpu-share ----------------------------------------------------------------------------

def _cmd_cpu_share(args: argparse.Namespace) -> int:
    from .compute_options import ZOO
    from .cpu_share import available_cores, co_run_overlay, contention_document, measure_contention
    from .time_slice import time_slice_fields
    from .wake_run import wake_run_fields
    from .provenance import check_output, write_yaml

    if args.scenario is not None:
        from .compute_scenario import plan_scenario

        scenario = plan_scenario(args.scenario, "cpu").scenario  # bad input: exit 2 before any worker starts
        model = f"{scenario.workload.model.name} of {args.scenario}"
        batch_size = args.batch_size or scenario.workload.batch_size
    elif args.model not in ZOO:
        raise InputError(f"unknown model {args.model!r}; known: {', '.join(ZOO)}", source="--model")
    else:
        model, batch_size = args.model, args.batch_size or 64
    ranks = option_ints(args.ranks, "--ranks")
    cores = option_ints(args.cores, "--cores") if args.cores else sorted({1, len(available_cores())})
    if max(cores) > len(available_cores()):
        raise InputError(f"at most {len(available_cores())} cores are available here, got {args.cores!r}",
                         source="--cores")
    if max(ranks) > 64:
        raise InputError("at most 64 co-running ranks", source="--ranks")
    check_output(args.out)
    if args.overlay:
        check_output(args.overlay)
    rows = measure_contention(ranks, cores, args.duration_s, args.rounds, args.model, batch_size,
                              scenario=args.scenario)
    document, fit = contention_document(rows, model=model, batch_size=batch_size,
                                        duration_s=args.duration_s, rounds=args.rounds,
                                        command=calibrate_command(args, "cpu-share"))
    document.update(wake_run_fields(available_cores()[0]))
    document.update(time_slice_fields(rows))
    write_yaml(args.out, document, "CPU-share calibration: k co-running ranks on c cores vs processor sharing.\n"
                                   f"Generated by: {document['provenance']['generated_by']}\nDo not hand-edit.")
    print(f"{'ranks':>5} {'cores':>5} {'step':>10} {'alone':>10} {'slowdown':>9} {'PS law':>7} {'ratio':>6}")
    for r in rows:
        print(f"{r['ranks']:>5} {r['cores']:>5} {format_time(r['step_s']):>10} {format_time(r['alone_s']):>10} "
              f"{r['slowdown']:>9.3f} {r['processor_sharing']:>7.2f} {r['ratio']:>6.3f}")
    print(f"contention factor {fit.contention_factor_:.3f} (1 = processor sharing holds); R2 {fit.r2_:.3f}, "
          f"processor sharing alone R2 {fit.processor_sharing_r2_:.3f}")
    print(f"a rank woken beside a busy one runs alone for {format_time(document['wake_run_s'])} (burst wall/CPU: "
          + ", ".join(f"{format_time(r['burst_s'])} {r['ratio']:.2f}" for r in document["wake_run_ratios"])
          + ")\n" + (f"ranks that outnumber their cores run {format_time(document['slice_s'])} at a time "
                     "(the scheduler's slice)\n" if document["slice_s"] else "")
          + f"wrote {args.out}")
    if args.overlay:
        overlay = co_run_overlay(document, args.out)
        write_yaml(args.overlay, overlay, "Platform overlay: how this host's CPU ranks slow each other (node.co_run).\n"
                                          f"Generated by: {document['provenance']['generated_by']}\nDo not hand-edit.")
        print(f"wrote {args.overlay} (node.co_run: {overlay['node']['co_run']['undersubscribed_factor']:.3f} "
              f"undersubscribed, {overlay['node']['co_run']['oversubscribed_factor']:.3f} oversubscribed)")
    return 0


# -- the parser ---------------------------------------------------------------------------

def add_calibrate_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``calibrate`` with its sub-commands to ``subparsers``; each sets ``func``."""
    from .compute_options import add_arguments as add_compute_arguments

    calibrate = subparsers.add_parser("calibrate", help="fit profiles and platform overlays from measurements",
                                      description="Fit compute profiles, platform overlays and CPU contention "
                                                  "from measurements; every file written records its provenance.")
    sub = calibrate.add_subparsers(dest="calibrate_command", required=True, parser_class=type(calibrate))

    compute = sub.add_parser("compute", help="time forward/backward/optimizer steps; fit t0 + t1*batch",
                             description="Time the forward/backward/optimizer step of the zoo's models (--models) "
                                         "or of one scenario's model (--scenario) at several batch sizes, fit "
                                         "t = t0 + t1*batch and write a compute profile; prints the fit's error at "
                                         "every batch size.")
    add_compute_arguments(compute)
    compute.set_defaults(func=_cmd_compute)

    network = sub.add_parser("network", help="MPI ping-pong + allreduce sweeps under mpiexec; write a platform overlay")
    network.add_argument("--ranks", type=int, default=2, help="MPI processes (default 2)")
    network.add_argument("--out", default="calibration/platforms/host-shm.yaml", help="overlay to write (default %(default)s)")
    network.add_argument("--max-size", default="4MiB", help="largest message of the default sweep (default %(default)s)")
    network.add_argument("--sizes", help="explicit comma-separated message sizes, e.g. 0,1KiB,64KiB,1MiB")
    network.add_argument("--budget-s", type=positive_float, default=0.25,
                         help="seconds per size and sweep (default 0.25)")
    network.add_argument("--batches", type=int_between(1), default=7,
                         help="round-robin batches per size; median kept (default 7)")
    network.add_argument("--large-from", default="64KiB",
                         help="link values fit sizes from here up (rendezvous regime; default %(default)s)")
    network.add_argument("--intra-kind", default="shm", help="link kind written for same-host ranks (default shm)")
    network.add_argument("--nic-kind", default="ethernet-tcp", help="link kind written between hosts (default ethernet-tcp)")
    network.add_argument("--no-allreduce", action="store_true", help="skip the collective sweeps (allreduce, broadcast)")
    network.add_argument("--timeout-s", type=positive_float, default=300.0,
                         help="give up after this long (default 300)")
    network.add_argument("--mpiexec-args", help="extra mpiexec arguments, e.g. '-f hostfile -ppn 1'")
    network.add_argument("--path", choices=("mpi", "runtime"), default="mpi", help=(
        "what is timed: mpi (default), the MPI library's own calls; runtime, simdist's MPI runtime (pickled "
        "sends, the arrival agreement before a collective, the driver's waiting), to predict runs of simdist "
        "validate"))
    network.add_argument("--after-compute", metavar="SCENARIO", help=(
        "time the calls 'after compute' (send/receive overheads, the runtime's turn) each right after one training "
        "step of this scenario's workload on the CPU, as in its runs; default: after writing twice the largest "
        "CPU cache, a bound that is far colder than a small model's step on a host with a large L3"))
    network.set_defaults(func=_cmd_network)

    trace = sub.add_parser("trace", help="parse nccl-tests/OSU/PyTorch-profiler/simdist files; fit; write an overlay")
    trace.add_argument("files", nargs="+", help="measurement files (format detected per file)")
    trace.add_argument("--format", default="auto", help="force one format: auto (default), nccl-tests, osu, "
                                                         "collective-csv, torch-profiler, simdist-trace, simdist-steps")
    trace.add_argument("--out", help="platform overlay to write from the link fits and collective cost tables")
    trace.add_argument("--summary", help="YAML file with every parsed table and fit")
    trace.add_argument("--link-size", default="64MiB",
                       help="collective regime holding this size sets the link (default %(default)s)")
    trace.add_argument("--large-from", default="64KiB", help="point-to-point link fit from this size up (default %(default)s)")
    trace.add_argument("--max-segments", type=int_between(1), default=4, help="most size regimes per fit (default 4)")
    trace.add_argument("--tolerance", type=positive_float, default=0.05,
                       help="fewest regimes whose worst error is within this (default 0.05)")
    trace.add_argument("--intra-kind", help="link kind for intra-node fits (default nvswitch for nccl-tests, shm otherwise)")
    trace.add_argument("--nic-kind", help="link kind for inter-node fits (default ib-hdr for nccl-tests, ethernet-tcp otherwise)")
    trace.add_argument("--link-class", default="nic", choices=("nic", "intra"),
                       help="where an OSU point-to-point fit goes (default nic: between nodes)")
    trace.add_argument("--bibw-limit", default="auto", choices=("auto", "cpu", "link"), help=(
        "what osu_bibw below twice osu_bw's bandwidth is put down to: cpu, each rank's CPU copying both "
        "directions' bytes (LogGOPS per-byte overheads); link, a cap on both directions together "
        "(aggregate_bandwidth); auto (default): cpu for link kinds that copy through the CPU (ethernet-tcp), "
        "link otherwise"))
    trace.add_argument("--osu-ranks", type=int_between(2), default=2,
                       help="processes of OSU collective runs (default 2)")
    trace.add_argument("--ranks", type=int_between(2), default=None,
                       help="the communicator size the collective files were measured on: a file that names "
                            "another (nccl-tests rank lines, CSV ranks column) is refused")
    trace.set_defaults(func=_cmd_trace)

    share = sub.add_parser("cpu-share", help="k co-running ranks on c cores vs processor sharing; fit the contention factor")
    share.add_argument("--ranks", default="1,2,4", help="co-running ranks to measure (default %(default)s)")
    share.add_argument("--cores", help="core counts to pin them to (default 1 and all available)")
    share.add_argument("--duration-s", type=positive_float, default=1.0,
                       help="seconds per configuration and round (default 1)")
    share.add_argument("--rounds", type=int_between(1), default=3, help="interleaved repetitions; median kept (default 3)")
    share.add_argument("--model", default="mlp", help="zoo model to run (default mlp)")
    share.add_argument("--scenario", help="run this scenario's workload instead (its model, dataset shape, optimizer "
                                          "and batch size): the contention of the job itself")
    share.add_argument("--batch-size", type=int_between(1), default=None,
                       help="batch size of each step (default 64; with --scenario the scenario's)")
    share.add_argument("--out", default="calibration/cpu_share/host-cpu.yaml", help="file to write (default %(default)s)")
    share.add_argument("--overlay", help="also write a platform overlay setting node.co_run from the fit, for "
                                         "platform: {overlays: [...]}")
    share.set_defaults(func=_cmd_cpu_share)

    from .noise_fit import add_noise_parser
    add_noise_parser(sub)
    return calibrate


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors and exit status 2 (for running this module on its own)."""

    def error(self, message: str):  # noqa: D401 - argparse API
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m simdist.calibrate.cli calibrate ...`` (the same as ``simdist calibrate ...``)."""
    parser = _Parser(prog="simdist")
    add_calibrate_parser(parser.add_subparsers(dest="command", required=True, parser_class=_Parser))
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except InputError as exc:
        print(f"simdist: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
