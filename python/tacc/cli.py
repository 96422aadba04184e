"""The `tacc` command: run, validate, plot and show scenarios and their results; document
every scenario key (`keys`); emulate them on a Linux testbed, once or repeatedly, and compare
two result directories, or the spread of several runs on either side.

Exit status: 0 success, 1 compiled engine missing, 2 bad input (scenario, option,
file or result directory) or a machine that lacks what the testbed needs, 3 a testbed
run that failed (a command, an agent or a traffic process), 130 interrupted. Each error is
one `tacc: error: ...` line on stderr; a scenario with several errors gives one line for
each, a testbed missing several things one `tacc: error: testbed: ...` line for each.
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import os
import sys
import threading
from collections.abc import Sequence

import tacc
from tacc.summary import format_seconds, read_summary, summary_table

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at start-up
if TYPE_CHECKING:
    from pathlib import Path

# Each command imports what it needs (pandas, matplotlib, the reproduction; even json, shlex
# and pathlib, about 4 ms of a `tacc run`) itself: importing them up front would take most of
# the time of `tacc --version` or `tacc validate`.


def entry() -> None:
    """The `tacc` program: `main`, then the exit. Where nothing is registered to run at exit
    and no other thread is alive, the interpreter's teardown would only free memory and
    collect garbage, a few milliseconds of a run that the operating system does anyway."""
    status = main()
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:  # None where the descriptor was closed at start
                stream.flush()
    except (OSError, ValueError):  # a closed pipe or file: the interpreter's exit reports it
        sys.exit(status)
    handlers = getattr(atexit, "_ncallbacks", None)  # CPython's; elsewhere, the usual exit
    if handlers is not None and handlers() == 0 and threading.active_count() == 1:
        os._exit(status)
    sys.exit(status)


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    args = _parser(words).parse_args(words)
    args.words = words  # the command line, for the reproduction report
    try:
        return args.command(args)
    except KeyboardInterrupt:
        print("tacc: interrupted", file=sys.stderr)
        return 130
    except tacc.EngineUnavailableError as exc:
        return _fail(exc, 1)
    except (OSError, ValueError, KeyError) as exc:  # ScenarioError is a ValueError
        return _fail(exc, 2)


def _parser(words: Sequence[str]) -> argparse.ArgumentParser:
    """The command line's parser. Of the commands, only the one named in `words` gets its
    options: adding every command's would be half the parser's cost in a `tacc run`."""
    parser = argparse.ArgumentParser(
        prog="tacc", description="Packet-level data-center network simulator."
    )
    parser.add_argument("--version", action="version", version=f"tacc {tacc.__version__}")
    commands = parser.add_subparsers(title="commands", required=True, metavar="COMMAND")
    typed = next((w for w in words if not w.startswith("-")), None)  # no option takes a value
    for name, (summary, description, fill) in _COMMANDS.items():
        command = commands.add_parser(name, help=summary, description=description)
        if name == typed:
            fill(command)
    return parser


def _fill_run(run: argparse.ArgumentParser) -> None:
    run.add_argument(
        "scenario", nargs="?", default="default", metavar="SCENARIO",
        help="scenario TOML file (default: the built-in default scenario)",
    )
    run.add_argument("--out", metavar="DIR",
                     help="result directory (default: out/<scenario name>)")
    run.add_argument("--seed", type=int, metavar="N", help="random seed (overrides the file's)")
    _add_set_option(run)
    run.add_argument("--no-plot", action="store_true", help="do not write PNG plots")
    run.add_argument("--quiet", action="store_true", help="print nothing but errors")
    run.add_argument("--threads", type=_positive, metavar="N",
                     help="threads to run the scenario's partitions on (default: the machine's "
                     "cores); they never change the results")
    run.add_argument("--partitions", type=_positive, metavar="N",
                     help="split the run into at most N partitions, by pods (default: 2 on a "
                     "fabric of 1,024 hosts or more; 1: none). They change the order of "
                     "simultaneous events and the random streams, as a seed would")
    _add_pcap_option(run)
    run.set_defaults(command=_run)


def _fill_validate(validate: argparse.ArgumentParser) -> None:
    validate.add_argument("scenario", metavar="SCENARIO", help='scenario TOML file or "default"')
    _add_set_option(validate)
    validate.set_defaults(command=_validate)


def _fill_keys(keys: argparse.ArgumentParser) -> None:
    keys.add_argument("name", nargs="?", metavar="TABLE[.KEY]")
    keys.add_argument("--markdown", action="store_true",
                      help="as the Markdown of docs/scenario-keys.md")
    keys.set_defaults(command=_keys)


def _fill_plot(plot: argparse.ArgumentParser) -> None:
    plot.add_argument("dir", type=_path, metavar="DIR")
    plot.set_defaults(command=_plot)


def _fill_show(show: argparse.ArgumentParser) -> None:
    show.add_argument("dir", type=_path, metavar="DIR")
    show.set_defaults(command=_show)


def _fill_testbed(testbed: argparse.ArgumentParser) -> None:
    testbed.add_argument(
        "scenario", nargs="?", default="default", metavar="SCENARIO",
        help="scenario TOML file (default: the built-in default scenario)",
    )
    testbed.add_argument("--out", type=_path, metavar="DIR",
                         help="result directory (default: out/<scenario name>-testbed)")
    _add_set_option(testbed)
    testbed.add_argument("--duration", type=_seconds, metavar="T",
                         help="emulate at most this long, e.g. 10s (default: the scenario's)")
    testbed.add_argument("--rate-cap", type=_rate, default=None, metavar="RATE",
                         help="the fastest link runs at this rate, every rate scaled alike "
                              "(default: 100Mbps)")
    testbed.add_argument("--keep-going", action="store_true",
                         help="run flows of a missing congestion control as its nearest "
                              "relative, and finish the run when an agent or traffic "
                              "process dies (each recorded in the result); with --repeat, "
                              "a failed run is recorded and the next one runs")
    testbed.add_argument("--no-scrub", action="store_true",
                         help="let VMs send what only a shim may send (feedback packets, IPR "
                              "bits): to measure an attack without the protection")
    testbed.add_argument("--mechanism-clock", choices=("auto", "real", "dilated"),
                         default="auto",
                         help="the mechanism's timers in real time or dilated by the rate "
                              "scale (auto: dilated for sdn-gcc, real otherwise)")
    testbed.add_argument("--approximate", action="store_true",
                         help="run a scenario that sets keys the testbed does not emulate "
                              "(refused otherwise, one error per key), listing each in "
                              "summary.json's testbed.not_emulated")
    testbed.add_argument("--link-delays", action="store_true",
                         help="emulate the links' delays, dilated by the rate scale (a delay "
                              "line per link; see docs/testbed.md: not yet the default)")
    _add_pcap_option(testbed)
    testbed.add_argument("--switches", choices=("auto", "linux", "ovs"), default="auto",
                         help="the switches: linux (namespaces that route), ovs (Open vSwitch "
                              "bridges driven by the SDN controller app) or auto (ovs for "
                              "a controller that needs OpenFlow: sdn-gcc, sdn-ecn; SICC's "
                              "controller runs beside linux switches)")
    testbed.add_argument("--repeat", type=int, default=1, metavar="N",
                         help="run the scenario N times, into DIR/run-1 ... DIR/run-N, and "
                              "write the spread over the runs (per flow the median, min, max "
                              "and a 95%% interval of goodput, share and FCT) to "
                              "DIR/repeat.json and DIR/repeat.csv (default: 1, one run in DIR)")
    testbed.add_argument("--cleanup", action="store_true",
                         help="remove what earlier runs left behind, then exit")
    testbed.add_argument("--no-plot", action="store_true", help="do not write PNG plots")
    testbed.add_argument("--quiet", action="store_true", help="print nothing but errors")
    testbed.set_defaults(command=_testbed)


def _fill_agent(agent: argparse.ArgumentParser) -> None:
    agent.add_argument("action", nargs="?", choices=["status"],
                       help="status: show the running agent of --state-dir")
    agent.add_argument("--config", type=_path, metavar="HOST.toml",
                       help="the host config: uplink, VMs or bridges, [mechanism]")
    agent.add_argument("--check", action="store_true",
                       help="check the config and exit")
    agent.add_argument("--state-dir", type=_path, metavar="DIR",
                       help="with status: the agent's state directory (default: the "
                            "config's state_dir, else /run/tacc-agent)")
    agent.set_defaults(command=_agent)


def _fill_fabric_daemon(daemon: argparse.ArgumentParser, switch: bool) -> None:
    daemon.add_argument("--config", type=_path, metavar="FABRIC.toml", required=True,
                        help="the fabric config")
    if switch:
        daemon.add_argument("--switch", required=True, metavar="NAME",
                            help="the switch, by its name in the config")
    daemon.add_argument("--check", action="store_true", help="check the config and exit")
    daemon.set_defaults(command=_controller)


def _fill_compare(compare: argparse.ArgumentParser) -> None:
    compare.add_argument("dirs", nargs="*", type=_path, metavar="DIR",
                         help="A and B, each a result directory or a repeat directory; with "
                              "-A or -B, the side they leave")
    compare.add_argument("-A", dest="side_a", nargs="+", type=_path, metavar="DIR",
                         help="side A as several result (or repeat) directories")
    compare.add_argument("-B", dest="side_b", nargs="+", type=_path, metavar="DIR",
                         help="side B as several result (or repeat) directories")
    compare.add_argument("--out", type=_path, metavar="FILE.md",
                         help="also write the comparison as Markdown")
    compare.add_argument("--bottleneck", metavar="PORT",
                         help="the port whose rate the shares are of (default: the most "
                              "congested port)")
    compare.set_defaults(command=_compare)


def _fill_reproduce(repro: argparse.ArgumentParser) -> None:
    repro.add_argument("names", nargs="*", metavar="PAPER|FIGURE",
                       help="papers or figure ids (default: all)")
    repro.add_argument("--quick", action="store_true",
                       help="1/5 of the simulated time and two seeds (minutes, not hours)")
    repro.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 1)),
                       metavar="N", help="parallel simulations (default: CPU count)")
    repro.add_argument("--engine", choices=("local", "ray"), default="local",
                       help="local process pool (default) or a ray cluster (RAY_ADDRESS)")
    repro.add_argument("--out", type=_path, default="out/reproduce", metavar="DIR",
                       help="output directory (default: out/reproduce); runs are cached here")
    repro.add_argument("--testbed", action="store_true",
                       help="also run the experiments' variants that fit on the testbed "
                            "(root; one run at a time, as many as the seeds) and judge every "
                            "claim there too; with --list: which fit and why the others "
                            "do not")
    repro.add_argument("--approximate", action="store_true",
                       help="with --testbed: also run the variants that set scenario keys "
                            "the testbed does not honour (each listed in the report)")
    repro.add_argument("--list", action="store_true", help="list the experiments and exit")
    repro.set_defaults(command=_reproduce)


# Each command: its line in `tacc --help`, the description of its own help, and what adds
# its options.
_COMMANDS = {
    "run": ("run a scenario and write its result directory", None, _fill_run),
    "validate": ("check a scenario without running it", None, _fill_validate),
    "keys": (
        "document a scenario's tables and keys: unit, default, accepted values",
        "Print what a scenario key means, its unit, default and accepted values: every table, "
        'one table ("tcp", "mechanism.hygenicc") or one key ("tcp.rto_min").',
        _fill_keys,
    ),
    "plot": ("write the PNG plots of a result directory", None, _fill_plot),
    "show": ("print the summary table of a result directory", None, _fill_show),
    "testbed": (
        "emulate a scenario on this machine (namespaces, tc, real TCP; root)",
        "Emulate a scenario with network namespaces, veth pairs, tc queues and the kernel's TCP "
        "and UDP, and write a result directory as `tacc run` does. Needs root. Rates are "
        "scaled down to --rate-cap.",
        _fill_testbed,
    ),
    "agent": (
        "run the host agent as a daemon on a hypervisor (root), or show a running agent's "
        "status",
        "Run a mechanism on a hypervisor tacc did not build: attach the eBPF programs to the "
        "VMs' ports and the uplink named by a host config, run the mechanism's host shim until "
        "SIGTERM, then detach everything (docs/deploy.md). `tacc agent status` prints what a "
        "running agent has attached and in force (exit status 3 if none runs).",
        _fill_agent,
    ),
    "controller": (
        "run the mechanism's SDN controller as a daemon for Open vSwitch switches",
        "Run the controller of sdn-gcc, sicc or sdn-ecn for the OVS switches of a fabric config "
        "(switches, their ports and cables, hosts and VMs, [mechanism]): the switches connect "
        "over OpenFlow 1.3, the hosts' agents over the control channel (docs/deploy.md). Runs "
        "until SIGTERM.",
        lambda daemon: _fill_fabric_daemon(daemon, switch=False),
    ),
    "switch-agent": (
        "run a switch's agent: ECN marking and the counters OpenFlow lacks (root)",
        "Beside an OVS switch of a fabric config: attach tacc's eBPF programs to the ports the "
        "config gives a device, mark CE above each port's `marking` threshold, and answer the "
        "controller's requests for a port's marks and queue on the switch's `stats` socket. "
        "Runs until SIGTERM.",
        lambda daemon: _fill_fabric_daemon(daemon, switch=True),
    ),
    "compare": (
        "two result directories side by side (simulation or testbed), or the spread of "
        "several runs",
        "Set two runs side by side: per-flow goodput and share of the bottleneck, Jain's index "
        "per flow group, completion times, drops and marks per port. A side may be several "
        "runs: a repeat directory (tacc testbed --repeat N) or several directories after -A or "
        "-B, e.g. `tacc compare -A sim-seed1 sim-seed2 sim-seed3 -B out/x-testbed`; it then "
        "shows the median over its runs, their min..max and the 95% interval of the median.",
        _fill_compare,
    ),
    "reproduce": (
        "re-run the papers' experiments and write figures and a report",
        "Re-run the papers' experiments (all, or by paper: hygenicc, sdn-gcc, sicc, sdn-ecn, "
        "or by figure id; --list shows them) and write REPORT.md, report.html and figures.",
        _fill_reproduce,
    ),
}


def _add_set_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set", dest="sets", action="append", default=[], type=_key_value,
        metavar="KEY=VALUE",
        help="override a scenario key, e.g. --set topology.senders=8 (repeatable)",
    )


def _add_pcap_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pcap", action="append", default=[], metavar="PORT",
                        help="capture what the port sends, e.g. --pcap 'sw0->r0' into "
                             "DIR/pcap/sw0-to-r0.pcapng (repeatable; as --set "
                             "output.pcap=[...])")


def _pcap_sets(args: argparse.Namespace) -> None:
    """--pcap as the scenario key it stands for."""
    if args.pcap:
        import json

        items = ", ".join(json.dumps(p) for p in args.pcap)  # a JSON string is a TOML one
        args.sets.append(("output.pcap", f"[{items}]"))


def _path(text: str) -> Path:
    from pathlib import Path

    return Path(text)


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def _seconds(text: str) -> float:
    from tacc.testbed.plan import parse_seconds

    try:
        return parse_seconds(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _rate(text: str) -> float:
    from tacc.testbed.plan import parse_rate

    try:
        return parse_rate(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return n


def _run(args: argparse.Namespace) -> int:
    stem = os.path.splitext(os.path.basename(args.scenario))[0]  # "default" -> out/default
    out = args.out if args.out is not None else os.path.join("out", stem)
    _pcap_sets(args)
    # The plotting libraries take most of a second to import: a thread imports them while
    # the engine, which lets go of the interpreter, simulates. The engine is loaded first: it
    # has every thread allocate from one heap (crates/tacc-sim/src/heap.rs), this one too.
    tacc._engine()
    plotting = None if args.no_plot else threading.Thread(target=importlib.import_module,
                                                          args=("tacc.plot",), daemon=True)
    if plotting is not None:
        plotting.start()
    try:
        written = tacc._run_dir(
            args.scenario, seed=args.seed, sets=args.sets, out=out,
            progress=not args.quiet, threads=args.threads, partitions=args.partitions,
        )
    finally:
        if plotting is not None:
            plotting.join()
    return _present(written, args)


def _present(written: str | os.PathLike[str], args: argparse.Namespace) -> int:
    """Plots, the summary table and the files of a result directory a command wrote."""
    summary = None
    if not args.no_plot:
        from tacc.plot import plot_result
        from tacc.results import load

        # Loaded once for the plots and the table: a large fabric's summary.json takes a
        # second to parse (156 MB at k = 32 over 1 s).
        result = load(written)
        plot_result(result)
        summary = result.summary
    if not args.quiet:
        from pathlib import Path

        root = Path(written)
        print(summary_table(read_summary(root) if summary is None else summary))
        print(f"\nwrote {root}:")
        for path in sorted(p for p in root.iterdir() if p.is_file()):
            print(f"  {path}")
    return 0


def _validate(args: argparse.Namespace) -> int:
    info = tacc.validate(args.scenario, sets=args.sets)
    print(
        f"{args.scenario}: OK: scenario {info['name']!r}, "
        f"{format_seconds(info['duration_s'])} simulated, {info['hosts']} hosts, "
        f"{info['switches']} switches, {info['links']} links, {info['flows']} flows"
    )
    return 0


def _keys(args: argparse.Namespace) -> int:
    from tacc import keys

    found = keys.tables(args.name)
    print(keys.markdown(found) if args.markdown else keys.text(found))
    return 0


def _plot(args: argparse.Namespace) -> int:
    from tacc.plot import plot_dir

    for path in plot_dir(args.dir):
        print(path)
    return 0


def _show(args: argparse.Namespace) -> int:
    print(summary_table(read_summary(args.dir)))
    return 0


def _testbed(args: argparse.Namespace) -> int:
    if args.repeat < 1:
        return _fail_lines([f"--repeat: expected a positive number of runs, got {args.repeat}"],
                           2)
    from tacc.testbed import TestbedError, TestbedUnavailable, run

    try:
        if args.cleanup:
            for line in run.cleanup() or ["nothing to clean up"]:
                print(line)
            return 0
        _pcap_sets(args)
        options = run.Options(out=args.out, duration_s=args.duration, keep_going=args.keep_going,
                              quiet=args.quiet, scrub=not args.no_scrub,
                              switches=args.switches,
                              mechanism_clock=args.mechanism_clock,
                              link_delays=args.link_delays, approximate=args.approximate)
        if args.rate_cap is not None:
            options.rate_cap_bps = args.rate_cap
        if args.repeat > 1:
            from tacc.testbed.repeat import run_repeated

            return _present_repeat(run_repeated(args.scenario, args.sets, options, args.repeat),
                                   args)
        written = run.run_testbed(args.scenario, args.sets, options)
    except TestbedUnavailable as exc:
        return _fail_lines([f"testbed: {item}" for item in exc.missing], 2)
    except TestbedError as exc:
        return _fail_lines([f"testbed: {line}" for line in _error_lines(exc)], 3)
    return _present(written, args)


def _present_repeat(written: Path, args: argparse.Namespace) -> int:
    """Each run's plots, the spread table, the files; the runs that failed (--keep-going)
    as errors after them (exit status 3, as a single run that failed with --keep-going)."""
    from tacc.testbed.repeat import CSV_FILE, REPEAT_FILE, read_header, spread_table

    header = read_header(written)
    runs = [written / d for d in header["summarized"]]
    if not args.no_plot:
        from tacc.plot import plot_dir

        for run in runs:
            plot_dir(run)
    if not args.quiet:
        print(spread_table(written))
        print(f"\nwrote {written}:")
        for path in (written / REPEAT_FILE, written / CSV_FILE, *runs):
            print(f"  {path}")
    failed = header["failed"]
    if not failed:
        return 0
    n = header["runs"]
    return _fail_lines([*(f"testbed: run {f['run']} of {n}: {line}" for f in failed
                          for line in _error_lines(RuntimeError(f["error"]))),
                        f"testbed: {len(runs)} of {n} runs summarized in "
                        f"{written / REPEAT_FILE}"], 3)


def _compare(args: argparse.Namespace) -> int:
    from tacc.testbed.compare import compare_sides

    # Each side: the directories after -A or -B, else the next directory given alone.
    alone = list(args.dirs)
    sides = [side or ([alone.pop(0)] if alone else None) for side in (args.side_a, args.side_b)]
    if alone or sides[0] is None or sides[1] is None:
        return _fail_lines([f"compare: expected two sides, DIR_A DIR_B or -A DIR... -B "
                            f"DIR... (a directory alone is a side -A or -B leaves open); "
                            f"got {len(args.dirs)} without -A or -B"], 2)
    comparison = compare_sides(sides[0], sides[1], bottleneck=args.bottleneck)
    print(comparison.text())
    if args.out is not None:
        args.out.write_text(comparison.markdown(), encoding="utf-8")
        print(f"\nwrote {args.out}")
    return 0


def _reproduce(args: argparse.Namespace) -> int:
    import shlex

    from tacc import reproduce  # matplotlib and the registry load only here
    from tacc.reproduce.report import summary_line

    from tacc.testbed import TestbedError, TestbedUnavailable

    if args.approximate and not args.testbed:
        return _fail_lines(["reproduce: --approximate goes with --testbed"], 2)
    if args.list:
        print(reproduce.testbed_table(args.names, args.quick, args.approximate)
              if args.testbed else reproduce.registry_table())
        return 0
    try:
        report, results = reproduce.reproduce(
            args.names, quick=args.quick, jobs=args.jobs, engine=args.engine, out=args.out,
            command=shlex.join(["tacc", *args.words]), testbed=args.testbed,
            approximate=args.approximate,
        )
    except TestbedUnavailable as exc:
        return _fail_lines([f"testbed: {item}" for item in exc.missing], 2)
    except TestbedError as exc:
        return _fail_lines([f"testbed: {line}" for line in _error_lines(exc)], 3)
    line = summary_line([r for e in results for r in e.rows])
    print(f"{line}; wrote {report} and {report.with_name('report.html')}")
    return 0


def _agent(args: argparse.Namespace) -> int:
    from tacc.deploy import agent

    if args.action == "status":
        state_dir = args.state_dir or (agent.state_dir_of(args.config) if args.config
                                       else agent.DEFAULT_STATE_DIR)
        try:
            print(agent.format_status(agent.read_status(state_dir)))
        except agent.AgentError as exc:
            return _fail_lines([str(exc)], 3)
        return 0
    if args.config is None:
        return _fail_lines(["agent: expected --config HOST.toml (or `tacc agent status`)"], 2)
    if args.state_dir is not None:
        return _fail_lines(["--state-dir applies to `tacc agent status`; the agent's is the "
                            "config's state_dir"], 2)
    try:
        agent.run(args.config, check=args.check)
    except agent.AgentError as exc:
        return _fail_lines([str(exc)], 3)
    if args.check:
        print(f"{args.config}: ok")
    return 0


def _controller(args: argparse.Namespace) -> int:
    """`tacc controller` and `tacc switch-agent` (with --switch)."""
    from tacc.deploy import controller

    try:
        if "switch" in args:
            controller.run_switch_agent(args.config, args.switch, check=args.check)
        else:
            controller.run(args.config, check=args.check)
    except controller.ControllerError as exc:
        return _fail_lines([str(exc)], 3)
    if args.check:
        print(f"{args.config}: ok")
    return 0


def _fail(exc: BaseException, status: int) -> int:
    return _fail_lines(_error_lines(exc), status)


def _fail_lines(lines: Sequence[str], status: int) -> int:
    for line in lines:
        print(f"tacc: error: {line}", file=sys.stderr)
    return status


def _error_lines(exc: BaseException) -> list[str]:
    """The exception's message, one error per line (the engine reports every error it
    finds in a scenario, one per line)."""
    if isinstance(exc, OSError) and exc.filename is not None:
        text = f"{exc.filename}: {exc.strerror or exc}"
    elif isinstance(exc, KeyError):
        text = f"missing key {exc.args[0]!r}" if exc.args else "missing key"
    else:
        text = str(exc)
    return [line.strip() for line in text.splitlines() if line.strip()] or [type(exc).__name__]
