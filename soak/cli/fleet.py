"""`soak fleet sbatch|report|history`: the Slurm batch script, the fleet report over many
summary.json files, and one GPU's history."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from soak.cli.args import EXIT_FAIL, EXIT_PASS, VERDICT_EXIT, Parser, positive, subcommand
from soak.cli.run import add_parser as add_run_parser
from soak.cli.run import run_config
from soak.config import SIM_ACROSS_NODES
from soak.errors import ConfigError


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`soak fleet` and its three verbs."""
    fleet = sub.add_parser(
        "fleet",
        help="soak a cluster under Slurm; fleet report; GPU history",
        description="Acceptance of many servers: a Slurm batch script that soaks every node at "
        "once, one report over all their summary.json files, and a history per GPU.",
    )
    verbs = fleet.add_subparsers(dest="fleet_command", required=True, parser_class=Parser)
    _sbatch_parser(verbs)
    _report_parser(verbs)
    _history_parser(verbs)


def _sbatch_parser(verbs: argparse._SubParsersAction) -> None:
    """`soak fleet sbatch`."""
    sbatch = subcommand(
        verbs,
        "sbatch",
        "write (and with --submit submit) a Slurm script: one soak per node, one report",
        "soak fleet sbatch [OPTIONS] -- [soak run options]: every option after -- goes to each "
        "node's `soak run` (its --out is the fleet folder, default reports). The job runs one "
        "soak per node with srun, then `soak fleet report` once. The last line printed is the "
        "script's path.",
        [
            "soak fleet sbatch --nodes 32 --gpus-per-node 8 -- --hours 2 --out /shared/acc",
            "soak fleet sbatch --nodelist gpu[001-004] --partition burnin --submit -- --hours 1",
            "soak fleet sbatch --nodes 4 --gpus-per-node 8 --across-nodes -- --workload ddp",
        ],
    )
    sbatch.add_argument(
        "--nodes",
        type=positive("--nodes", int),
        help="nodes to soak (count; default: those --nodelist names; one of the two is needed)",
    )
    sbatch.add_argument("--nodelist", help="Slurm node list, e.g. gpu[001-032] (default: any)")
    sbatch.add_argument("--partition", help="Slurm partition (default: the cluster's)")
    sbatch.add_argument("--account", help="Slurm account (default: yours)")
    sbatch.add_argument(
        "--gpus-per-node", type=positive("--gpus-per-node", int), help="GPUs (default: none asked)"
    )
    sbatch.add_argument(
        "--no-exclusive", action="store_true", help="share nodes (default: --exclusive)"
    )
    sbatch.add_argument(
        "--margin-minutes",
        type=positive("--margin-minutes", allow_zero=True),
        default=15.0,
        help="minutes added to the soak for start-up and the report in --time (default 15)",
    )
    sbatch.add_argument("--job-name", default="soak-fleet", help="job name (default soak-fleet)")
    sbatch.add_argument("--script", type=Path, help="script path (default OUT/soak-fleet.sbatch)")
    sbatch.add_argument(
        "--history", type=Path, help="the report's GPU history (default OUT/fleet-history.sqlite)"
    )
    sbatch.add_argument("--submit", action="store_true", help="submit with sbatch (default: no)")
    sbatch.add_argument(
        "--across-nodes",
        action="store_true",
        help="with --workload ddp: one torch.distributed group over every node, rendezvous "
        "from Slurm's environment (default: a group per node)",
    )
    sbatch.add_argument("run_args", nargs="*", metavar="-- RUN_OPTION", help="soak run options")
    sbatch.set_defaults(handler=_fleet_sbatch)


def _report_parser(verbs: argparse._SubParsersAction) -> None:
    """`soak fleet report`."""
    report = subcommand(
        verbs,
        "report",
        "fleet.html + fleet.json over every run in DIR",
        "Read every run's summary.json under DIR (never the stores) and write DIR/fleet.html and "
        "DIR/fleet.json: per-SKU distributions, fleet outliers by median/MAD, nodes ranked, a "
        "rack/slot heat map, missing nodes. With --table, the same on another tool's results.",
        [
            "soak fleet report /shared/acc",
            "soak fleet report out --table sgemm.csv --id-col uuid --map time=kernel_ms",
        ],
    )
    report.add_argument("dir", type=Path, help="folder of OUT/<host>/<run>/ (output folder too)")
    report.add_argument(
        "--table",
        type=Path,
        help="CSV of per-device results from another tool (default: the runs' summary.json)",
    )
    report.add_argument("--id-col", default="uuid", help="--table: device id column (default uuid)")
    report.add_argument(
        "--map",
        action="append",
        default=[],
        metavar="FIELD=COLUMN",
        help="--table: a column for a field (throughput or time, temp_c, power_w, sm_clock_mhz, "
        "node, sku, serial); none by default",
    )
    report.add_argument("--layout", type=Path, help="CSV host,rack,slot (default: run tags)")
    report.add_argument(
        "--expect", type=Path, help="node list, one host a line (default DIR/fleet-nodes.txt)"
    )
    report.add_argument(
        "--k-mad",
        type=positive("--k-mad"),
        default=3.0,
        help="outlier distance in robust σ (1.4826·MAD) from the fleet median (default 3)",
    )
    report.add_argument(
        "--min-deficit",
        type=positive("--min-deficit", allow_zero=True),
        default=3.0,
        help="never flag throughput less than this many %% below the median (default 3)",
    )
    report.add_argument(
        "--min-temp-excess",
        type=positive("--min-temp-excess", allow_zero=True),
        default=5.0,
        help="never flag a steady temperature less than this many °C over the median (default 5)",
    )
    report.add_argument(
        "--history",
        type=Path,
        help="GPU history to add the runs to (default DIR/fleet-history.sqlite; not with --table)",
    )
    report.add_argument(
        "--no-history",
        action="store_true",
        help="add nothing to a history (default: the runs are added to --history's file)",
    )
    report.set_defaults(handler=_fleet_report)


def _history_parser(verbs: argparse._SubParsersAction) -> None:
    """`soak fleet history`."""
    history = subcommand(
        verbs,
        "history",
        "one GPU's runs over time, and its drift",
        "Print every recorded run of one GPU (by serial or UUID) from a fleet history file, "
        "and flag a drift of its steady throughput or temperature against its first acceptance.",
        [
            "soak fleet history 1650123456789 --history /shared/acc/fleet-history.sqlite",
            "soak fleet history GPU-87570fdd-0000 --history h.sqlite --drift 2",
        ],
    )
    history.add_argument("device", help="the GPU's serial or UUID")
    history.add_argument("--history", type=Path, required=True, help="the history file")
    history.add_argument(
        "--drift",
        type=positive("--drift"),
        default=3.0,
        help="flag a steady throughput this many %% below the first acceptance (default 3)",
    )
    history.add_argument(
        "--drift-temp",
        type=positive("--drift-temp"),
        default=5.0,
        help="flag a steady temperature this many °C above the first acceptance (default 5)",
    )
    history.set_defaults(handler=_fleet_history)


def _fleet_sbatch(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from soak.fleet import sbatch

    run_args = list(args.run_args)
    # Every node runs these: check them here, where a mistake costs nothing.
    parser = Parser(prog="soak")
    add_run_parser(parser.add_subparsers(dest="command", required=True, parser_class=Parser))
    run = parser.parse_args(["run", *run_args])
    config = run_config(run, ["run", *run_args])
    if args.across_nodes and config.workload != "ddp":
        raise ConfigError(f"--across-nodes: only with --workload ddp (not {config.workload})")
    if args.across_nodes and config.backend == "sim":
        raise ConfigError(SIM_ACROSS_NODES)
    out = config.out.resolve()
    report_args = ("--history", str(args.history.resolve())) if args.history else ()
    spec = sbatch.BatchSpec(
        out=out,
        run_args=sbatch.without_out(run_args),
        duration_s=config.duration_s,
        baseline_s=config.baseline_s,
        nodes=args.nodes,
        nodelist=args.nodelist,
        partition=args.partition,
        account=args.account,
        gpus_per_node=args.gpus_per_node,
        exclusive=not args.no_exclusive,
        margin_s=args.margin_minutes * 60,
        job_name=args.job_name,
        report_args=report_args,
        across_nodes=args.across_nodes,
    )
    sbatch.check_spec(spec)
    path = sbatch.write_script(args.script or out / sbatch.SCRIPT_NAME, sbatch.render_script(spec))
    if args.submit:
        print(f"submitted: job {sbatch.submit(path)}")
    print(path)
    return EXIT_PASS


def _fleet_report(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from soak.fleet import collect, history
    from soak.fleet.analyze import Settings, read_layout
    from soak.fleet.ddp_groups import find_groups
    from soak.fleet.report import make_report

    layout = read_layout(args.layout) if args.layout else None
    expect = collect.read_node_list(args.expect) if args.expect else None
    if args.table is not None:
        if args.history is not None:
            raise ConfigError("--history: not with --table (a table has no runs to record)")
        data = collect.collect_table(args.table, args.id_col, collect.parse_map(args.map))
        data.expected = expect
    else:
        if args.map:
            raise ConfigError("--map: only with --table")
        data = collect.collect_summaries(args.dir, expect)
    settings = Settings(args.k_mad, args.min_deficit / 100, args.min_temp_excess)
    db = (
        None if args.table or args.no_history else args.history or args.dir / "fleet-history.sqlite"
    )
    if db is not None:
        history.check_path(db)
    result, html = make_report(data, args.dir, settings, layout)
    if db is not None:
        added = history.record_runs(db, collect.all_runs(args.dir))
        print(f"history: {added} new runs recorded in {db}")
    counts = f"{len(data.nodes)} nodes, {sum(len(n.devices) for n in data.nodes)} devices"
    print(f"fleet: {result.verdict} ({counts}, {len(result.outliers)} outliers)")
    for o in result.outliers:
        print(f"  {o.status.upper():4}  {o.device.uuid or o.device.serial}: {o.message}")
    for host in result.missing:
        print(f"  MISSING  {host}: expected, but left no summary.json")
    for path, why in data.unreadable:
        print(f"  UNREADABLE  {path}: {why}")
    for group in find_groups(data):
        print(f"  DDP  {group.name or group.master}: {group.pace_message()}")
        for line in group.failure_messages():
            print(f"  DDP  {group.name or group.master}: rank lost: {line}")
    print(html)
    return VERDICT_EXIT[result.verdict]


def _fleet_history(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from soak.fleet import history

    entries = history.device_runs(args.history, args.device)
    if not entries:
        raise ConfigError(f"{args.device}: no device with that serial or UUID in {args.history}")
    found = history.drifts(entries, args.drift / 100, args.drift_temp)
    for line in history.format_history(args.device, entries, found):
        print(line)
    print(args.history)
    return EXIT_FAIL if found else EXIT_PASS
