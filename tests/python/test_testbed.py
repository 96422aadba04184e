"""The testbed (`tacc testbed`): plan checks, rate scaling, the machine's features, result
files, and, marked `testbed` (root, namespaces, qdiscs, bpffs), the traffic process, the
topology and the teardown of a failing run.

The plan fixture (data/motivating-plan.json) is the default scenario's plan written by hand
in the schema of `tacc._core.plan`. Tests marked `testbed` skip, naming what is missing,
unless TACC_REQUIRE_TESTBED=1, which makes them fail instead.
"""

from __future__ import annotations

import csv
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import tacc
from tacc import cli, testbed
from tacc.plot import plot_dir
from tacc.summary import read_summary, summary_table
from tacc.testbed import (apps, collect, departures, features, plan as plans, run, shell,
                          topology)
from tacc.testbed.topology import Names

DATA = Path(__file__).parent / "data"
PLAN_FILE = DATA / "motivating-plan.json"
INCAST_SMALL = DATA / "incast-small.toml"
WEBSEARCH_SMALL = DATA / "websearch-small.toml"
# A full segment's wire time at 100 Mb/s: 1500 IP bytes (htb counts those) for 1448 of data.
SEGMENT_S, SEGMENT_DATA = 1500 * 8 / 100e6, 1448
# The frames a 100 Mb/s port's HTB lets through on its tokens at once: a flow's first ones
# cross the path without waiting their turn (web.0, 21,681 B in 15 frames, took 1.668 ms,
# 1.71 ms at 0.95 of the line rate).
BURST_FRAMES = max(2 * topology.MTU_FRAME, 100e6 * topology.BURST_TIME_S / 8) / topology.MTU_FRAME
ENGINE_FLOWS_HEADER = (  # crates/tacc-sim/src/output.rs
    "name,group,src,dst,transport,cc,ecn,bytes_delivered,start,end,fct,goodput_mbps,"
    "completed,retransmits,fast_retransmits,timeouts,ecn_reductions"
)


@pytest.fixture
def plan() -> dict[str, Any]:
    return json.loads(PLAN_FILE.read_text())


def test_the_fixture_plan_passes_the_checks(plan: dict[str, Any]) -> None:
    plans.check_plan(plan)

    assert plans.port_pairs(plan) == [(0, 1), (2, 3), (4, 5), (6, 7), (8, 9)]


SHIPPED = sorted((Path(tacc.__file__).parent / "scenarios" / "papers").glob("*.toml"))


@pytest.mark.parametrize("scenario", ["default", *SHIPPED], ids=lambda s: Path(s).stem)
def test_the_engines_plans_of_the_shipped_scenarios_can_be_built(engine: None,
                                                                 scenario: str) -> None:
    if Path(scenario).name == "hygenicc_attack.toml":
        # its forging VM needs raw packets, which the testbed's sources do not send
        with pytest.raises(plans.PlanError, match="flow forged-feedback forges signals"):
            plans.load_plan(scenario)
        return

    plan = plans.load_plan(scenario)  # checked as it is loaded

    assert len(plans.port_pairs(plan)) * 2 == len(plan["ports"])


def test_the_testbed_refuses_what_it_cannot_run(engine: None) -> None:
    sicc = Path(tacc.__file__).parent / "scenarios" / "papers" / "sicc_dumbbell.toml"
    with pytest.raises(plans.PlanError, match="SICC's in-switch mode"):
        plans.load_plan(sicc, [("mechanism", '{kind="sicc",mode="switch"}')])


@pytest.mark.parametrize("mechanism, kind, switches", [
    ('{kind="sicc"}', "agents", "linux"),
    ('{kind="sicc",copy_at="all"}', "agents", "linux"),
    ('{kind="sdn-gcc"}', "openflow", "ovs"),
    ('{kind="sdn-ecn"}', "openflow", "ovs"),
    ('{kind="hygenicc"}', None, "linux"),
])
def test_a_controller_that_needs_no_openflow_runs_beside_linux_switches(
        engine: None, mechanism: str, kind: str | None, switches: str) -> None:
    """SICC's controller reads only what the switch agents serve (their ports' copies of
    SYNs and FINs, their queue lengths): it runs beside Linux switches, and nothing of it is
    left out there. SDN-GCC and SDN-ECN have a switch hook (each flow's first packet to the
    app, its bytes counted in an OpenFlow rule): they take Open vSwitch switches, and Linux
    switches say they do not run them."""
    plan = plans.load_plan(DATA / "incast-over-elephants.toml", [("mechanism", mechanism)])

    assert run.controller_kind(plan) == kind
    assert run.resolve_switches(kind, "auto") == switches
    notes = run.switch_notes(plan, kind, "linux")
    if kind == "openflow":
        assert notes == [f"the {plan['mechanism']['kind']} controller: not run (it needs "
                         "OpenFlow, which Linux switches do not have; --switches ovs or auto "
                         "runs it), the host agents run alone"]
    else:
        assert notes == []


def test_a_plan_dilated_in_time_keeps_its_rates_and_sizes(engine: None) -> None:
    """Applications at a tenth of the rates run ten times slower: every time of the plan
    (duration, starts, epochs, jitter, bins, the routes' minimum RTO) ten times longer, and
    nothing else changed; a plan without applications keeps its time."""
    plan = plans.load_plan(INCAST_SMALL, [("topology.link_rate", '"1Gbps"')])
    plan = apps.expand(plan, apps.workload(INCAST_SMALL, []))
    assert plans.time_dilation(plan, 0.1) == pytest.approx(10.0)
    assert plans.time_dilation(plan, 1.0) == 1.0
    assert plans.time_dilation(plans.load_plan(DATA / "four-flows.toml"), 0.1) == 1.0

    slow = plans.dilated(plan, 10.0)

    assert slow["duration_ns"] == 10 * plan["duration_ns"]
    assert [f["start_ns"] for f in slow["flows"]] == [10 * f["start_ns"] for f in plan["flows"]]
    assert [f["bytes"] for f in slow["flows"]] == [f["bytes"] for f in plan["flows"]]
    inc, slow_inc = plan["apps"][0]["incast"], slow["apps"][0]["incast"]
    assert (slow_inc["start_ns"], slow_inc["jitter_ns"]) == (10 * inc["start_ns"],
                                                             10 * inc["jitter_ns"])
    assert slow_inc["bytes"] == inc["bytes"] and slow_inc["epochs"] == inc["epochs"]
    assert slow["output"]["goodput_bin_ns"] == 10 * plan["output"]["goodput_bin_ns"]
    assert slow["tcp"]["rto_min_ns"] == 10 * plan["tcp"]["rto_min_ns"]
    assert slow["ports"] == plan["ports"]  # rates are scaled, and delays dilated, apart


def test_a_dilated_runs_results_are_put_back_in_the_scenarios_time(
        write_result: Callable[..., Path], tmp_path: Path) -> None:
    root = write_result(tmp_path / "run")
    summary = json.loads((root / "summary.json").read_text())
    summary["testbed"] = {"backlog_samples": {"every_s": 0.01, "other_ports_every_s": 0.1}}
    (root / "summary.json").write_text(json.dumps(summary))
    before = {name: collect.read_csv(root / name) for name in ("flows.csv", "goodput.csv")}

    collect.undilate(root, 10.0)

    after = json.loads((root / "summary.json").read_text())
    assert after["sim_seconds"] == pytest.approx(summary["sim_seconds"] / 10)
    assert after["goodput_bin_s"] == pytest.approx(summary["goodput_bin_s"] / 10)
    assert after["testbed"]["backlog_samples"]["every_s"] == pytest.approx(0.001)
    for old, new in zip(summary["flows"], after["flows"], strict=True):
        assert new["start"] == pytest.approx(old["start"] / 10)
        assert new["goodput_mbps"] == old["goodput_mbps"]  # rates stay as measured
    goodput = collect.read_csv(root / "goodput.csv")
    assert [float(r["time_s"]) for r in goodput] == pytest.approx(
        [float(r["time_s"]) / 10 for r in before["goodput.csv"]])
    assert [r["goodput_mbps"] for r in goodput] == [r["goodput_mbps"]
                                                   for r in before["goodput.csv"]]
    flows = collect.read_csv(root / "flows.csv")
    assert [r["fct"] == "" for r in flows] == [r["fct"] == "" for r in before["flows.csv"]]


def test_open_loop_flows_keep_the_engines_ports_and_incast_flows_take_free_ones(
        engine: None) -> None:
    """An open-loop flow's source port picks its ECMP path, so the testbed sends it from the
    port the engine gives it; an incast flow's port is new on its VM."""
    extra = ("incast", '[{name="q",aggregator="r0",workers="s{i}",count=3,bytes="10KB",'
             'epochs=2,start="100ms"}]')
    plan = plans.load_plan(WEBSEARCH_SMALL, [extra])
    drawn = apps.workload(WEBSEARCH_SMALL, [extra])
    flows = apps.expand(plan, drawn)["flows"]
    by_name = {f["name"]: f for f in flows}
    assert all((by_name[w["name"]]["src_port"], by_name[w["name"]]["dst_port"])
               == (w["src_port"], w["dst_port"]) for w in drawn)
    incast = [f for f in flows if "incast" in f]
    assert len(incast) == 6
    tuples = {(f["src_vm"], f["dst_vm"], f["src_port"], f["dst_port"]) for f in flows}
    assert len(tuples) == len(flows)
    assert min(f["src_port"] for f in flows) >= tacc._engine().FIRST_PORT
    assert run.resolve_switches(run.controller_kind(plan), "linux") == "linux"


def _four_flows_with(tmp_path: Path, tcp_lines: str) -> Path:
    path = tmp_path / "four-flows.toml"
    text = (DATA / "four-flows.toml").read_text()
    path.write_text(text.replace("ecn = true\n", "ecn = true\n" + tcp_lines))
    return path


def test_keys_the_testbed_does_not_emulate_are_refused_one_line_each(
    engine: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused before anything is built (no root needed): each key with its file and line,
    or the --set that gave it; queue_sample, which changes only the result files, is not
    refused."""
    path = _four_flows_with(tmp_path, 'dupthresh = 5\nrto_init = "3s"\n')

    status = cli.main(["testbed", str(path), "--set", "flows[0].drop_segments=[3]"])

    errors = capsys.readouterr().err.splitlines()
    assert status == 2
    assert errors[0] == (f"tacc: error: {path}:23: tcp.dupthresh: Linux's duplicate-ACK "
                         "threshold is 3 (tcp_reordering), with RACK's time-based loss "
                         "detection, not set")
    assert errors[1] == f"tacc: error: {path}:24: tcp.rto_init: Linux's initial RTO is 1s, not set"
    assert errors[2] == ("tacc: error: --set flows[0].drop_segments: flows[0].drop_segments: "
                         "scripted segment drops are not emulated")
    assert "--approximate" in errors[3] and len(errors) == 4


def test_a_set_replaces_the_departing_keys_it_covers(engine: None, tmp_path: Path) -> None:
    path = _four_flows_with(tmp_path, "dupthresh = 5\n")
    found = departures.scenario_departures(path, [("tcp", '{cc="newreno",ecn=true}')])
    assert [m for m, d in found if not d.output_only] == []
    assert [m for m, _ in departures.scenario_departures(path, [("tcp.dupthresh", "3")])] == [
        f"{path}:33: output.queue_sample: queues.csv is sampled every 100ms at most often"]


def test_the_notes_say_when_linux_reduces_windows_otherwise_than_the_scenario(
        plan: dict[str, Any]) -> None:
    # Linux always reduces with PRR; the scenario asks for RFC 6675's recovery.
    assert any("RFC 6937" in n for n in plans.plan_notes(plan, link_delays=False))

    plan["tcp"]["prr"] = True

    assert not any("RFC 6937" in n for n in plans.plan_notes(plan, link_delays=False))
    # A scenario that sets it is refused key by key, or listed once with --approximate.
    plan["tcp"]["prr"] = False
    assert not any("RFC 6937" in n
                   for n in plans.plan_notes(plan, link_delays=False, departed={"tcp.prr"}))


def test_each_missing_plan_field_is_one_error_line(plan: dict[str, Any]) -> None:
    del plan["seed"]
    del plan["tcp"]["mss"]
    del plan["flows"][1]["dst_port"]

    with pytest.raises(plans.PlanError) as err:
        plans.check_plan(plan)

    assert str(err.value).splitlines() == [
        "plan: missing seed", "plan: flows[1]: missing dst_port", "plan: tcp: missing mss",
    ]


def test_a_host_with_two_links_is_refused(plan: dict[str, Any]) -> None:
    extra = dict(plan["ports"][0], name="s0->sw0 (second)")
    plan["ports"] += [extra, dict(plan["ports"][1], name="sw0->s0 (second)")]

    with pytest.raises(plans.PlanError, match="host s0 has 2 links"):
        plans.check_plan(plan)


def test_two_flows_with_one_five_tuple_are_refused(plan: dict[str, Any]) -> None:
    # The engine's UDP flows share port 9 on r0: their senders tell them apart.
    assert len({f["dst_port"] for f in plan["flows"][1:]}) == 1
    plan["flows"][2]["src_vm"] = plan["flows"][1]["src_vm"]

    with pytest.raises(plans.PlanError, match="competitor.0 and competitor.1 are one udp flow"):
        plans.check_plan(plan)


def test_rates_scale_down_to_the_cap(plan: dict[str, Any]) -> None:
    scale = plans.rate_scale(plan, 100e6)

    assert scale == pytest.approx(0.1)
    assert plans.scale_message(plan, scale) == (
        "rates scaled down x10: the 1Gbps links run at 100Mbps")
    assert plans.rate_scale(plan, 10e9) == 1.0
    assert plans.scale_message(plan, 1.0) is None


def test_traffic_specs_give_each_vm_its_sinks_and_sources(plan: dict[str, Any],
                                                         tmp_path: Path) -> None:
    specs = run.traffic_specs(plan, {"newreno": "reno"}, 0.1, tmp_path, 15 * 10**9)

    assert sorted(specs) == [0, 1, 2, 3, 4]
    assert [s["flow"] for s in specs[4]["sinks"]] == [0, 1, 2, 3]
    assert specs[4]["sources"] == []
    (tagged,) = specs[0]["sources"]
    assert (tagged["cc"], tagged["dst"], tagged["dst_port"]) == ("reno", "10.0.0.5", 5001)
    assert specs[4]["sinks"][1]["src"] == "10.0.0.2"  # competitor.0's sender
    assert [specs[k]["sources"][0]["rate_bps"] for k in (1, 2, 3)] == [100_000_000] * 3
    assert plan["flows"][1]["rate_bps"] == 1_000_000_000  # the plan itself is left alone
    # A flow starting after the (shortened) end is not run at all.
    short = run.traffic_specs(plan, {}, 0.1, tmp_path, 5 * 10**9)
    assert 0 not in short and [s["flow"] for s in short[4]["sinks"]] == [1, 2, 3]


def test_a_udp_sink_counts_a_datagram_when_it_arrived_not_when_it_was_read() -> None:
    """The kernel's arrival stamp (SO_TIMESTAMPNS) on CLOCK_MONOTONIC: a datagram read 300 ms
    late is still placed where it arrived, so a sink starved of the CPU does not pile its
    backlog into one bin."""
    import socket
    import time

    from tacc.testbed import traffic

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx, \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
        rx.setsockopt(socket.SOL_SOCKET, traffic.SO_TIMESTAMPNS, 1)
        rx.bind(("127.0.0.1", 0))
        # The kernel turns arrival stamps on for the first such socket in deferred work;
        # until then it stamps at the read (a sink binds seconds before its flows start).
        time.sleep(0.2)
        offset = time.clock_gettime_ns(time.CLOCK_REALTIME) - time.monotonic_ns()
        sent = time.monotonic_ns()
        tx.sendto(b"x" * 100, rx.getsockname())
        time.sleep(0.3)
        read = time.monotonic_ns()
        space = socket.CMSG_SPACE(traffic.TIMESPEC.size)
        n, anc, _, _ = rx.recvmsg_into([bytearray(2048)], space)
    at = traffic.arrival_ns(anc, offset)
    assert n == 100 and at is not None
    assert sent - 1_000_000 <= at <= sent + 50_000_000 < read, (sent, at, read)
    assert traffic.arrival_ns([], offset) is None


def test_one_tcp_ecn_per_vm_and_disagreements_recorded(plan: dict[str, Any]) -> None:
    plan["flows"].append(dict(plan["flows"][0], name="marked", ecn=True, dst_port=20010))

    settings, disagreements = plans.vm_tcp_ecn(plan)

    assert settings == {0: 1}  # the UDP senders ask nothing; receivers accept (2)
    assert disagreements == [
        "VM s0: flows marked ask ECN and tagged do not; one tcp_ecn per VM: all ask it"]


def test_dctcp_asks_for_ecn_as_in_the_engine(plan: dict[str, Any]) -> None:
    plan["flows"][0]["cc"] = "dctcp"

    assert plans.vm_tcp_ecn(plan) == ({0: 1}, [])


def test_units_read_as_in_scenario_files() -> None:
    assert plans.parse_rate("100Mbps") == 100e6
    assert plans.parse_rate("2.5gbps") == 2.5e9
    assert plans.parse_seconds("500ms") == 0.5
    with pytest.raises(ValueError, match="expected a time"):
        plans.parse_seconds("5 parsecs")


def test_a_missing_dctcp_runs_as_the_bpf_dctcp_or_is_named(
    plan: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    available = tmp_path / "tcp_available_congestion_control"
    available.write_text("reno cubic bbr\n")
    monkeypatch.setattr(features, "AVAILABLE_CC", available)
    plan["flows"][0]["cc"] = "dctcp"

    monkeypatch.setattr(features.dctcp, "problem", lambda: None)
    cc, missing, notes, bpf = features._congestion_controls(plan, keep_going=False)
    assert (cc, missing, bpf) == ({"dctcp": "dctcp"}, [], True)
    assert notes == ["dctcp: the kernel has no dctcp module; tacc's BPF DCTCP (struct_ops) "
                     "ran instead"]

    monkeypatch.setattr(features.dctcp, "problem", lambda: "bpftool: not found on PATH")
    cc, missing, notes, bpf = features._congestion_controls(plan, keep_going=False)
    assert missing == ["congestion control dctcp (flows tagged): no dctcp module, and "
                       "bpftool: not found on PATH; --keep-going runs them as reno"]
    cc, missing, notes, bpf = features._congestion_controls(plan, keep_going=True)
    assert (cc, missing, bpf) == ({"dctcp": "reno"}, [], False)
    assert notes == ["dctcp missing (no dctcp module, and bpftool: not found on PATH): flows "
                     "tagged ran reno"]


def test_every_missing_tool_and_root_are_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    real_which = features.shutil.which
    monkeypatch.setattr(features.shutil, "which",
                        lambda tool: None if tool in ("ethtool", "ping") else real_which(tool))
    monkeypatch.setattr(features.os, "geteuid", lambda: 1000)

    problems = features.host_problems("tacc-0000-probe")

    assert problems == [
        "ethtool: not found on PATH (Debian package ethtool)",
        "ping: not found on PATH (Debian package iputils-ping)",
        "not root: namespaces, qdiscs and the BPF filesystem need euid 0",
    ]


def test_check_lists_every_missing_item_at_once(
    plan: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    available = tmp_path / "cc"
    available.write_text("reno cubic\n")
    monkeypatch.setattr(features, "AVAILABLE_CC", available)
    monkeypatch.setattr(features, "host_problems", lambda _ns: ["not root: ..."])
    monkeypatch.setattr(features, "agent_problems", lambda: ["agent: ..."])
    monkeypatch.setattr(features.dctcp, "problem", lambda: "no BPF DCTCP in this build")
    plan["flows"][0]["cc"] = "dctcp"

    with pytest.raises(testbed.TestbedUnavailable) as err:
        features.check(plan, "tacc-0000-probe")

    assert [m.split(":")[0] for m in err.value.missing] == [
        "not root", "congestion control dctcp (flows tagged)", "agent"]


def test_the_cli_prints_one_line_per_missing_item(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def unavailable(*_args: object) -> Path:
        raise testbed.TestbedUnavailable(["not root: x", "ethtool: not found on PATH"])

    monkeypatch.setattr(run, "run_testbed", unavailable)

    assert cli.main(["testbed"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "tacc: error: testbed: not root: x", "tacc: error: testbed: ethtool: not found on PATH"]


def test_a_failed_testbed_run_exits_3(monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    def failed(*_args: object) -> Path:
        raise testbed.TestbedError("agent-sw0 exited with status 1 at 2.5s: lost its map")

    monkeypatch.setattr(run, "run_testbed", failed)

    assert cli.main(["testbed", "--duration", "2s"]) == 3
    assert capsys.readouterr().err == (
        "tacc: error: testbed: agent-sw0 exited with status 1 at 2.5s: lost its map\n")


def test_qdisc_counters_come_from_the_root_htb_and_clsact() -> None:
    """The root counts every class: the default leaf's bfifo and an agent's limiters."""
    text = json.dumps([
        {"kind": "htb", "handle": "1:", "dev": "p8", "bytes": 3000, "packets": 2, "drops": 5,
         "backlog": 1500, "qlen": 1},
        {"kind": "bfifo", "handle": "2:", "dev": "p8", "parent": "1:2", "bytes": 1500,
         "packets": 1, "drops": 2, "backlog": 0, "qlen": 0},
        {"kind": "clsact", "handle": "ffff:", "dev": "p8", "bytes": 0, "packets": 0,
         "drops": 7, "backlog": 0, "qlen": 0},
    ])

    assert collect.parse_qdiscs(text) == {"p8": {
        "tx_bytes": 3000, "tx_pkts": 2, "dropped_overflow": 5, "backlog_pkts": 1,
        "backlog_bytes": 1500, "dropped_aqm": 7}}


def _measured(plan: dict[str, Any]) -> collect.Measured:
    """Four seconds of the motivating experiment as a testbed run would record them: the
    UDP flows 0-2 s, the tagged flow from 1 s (bins of 100 ms)."""
    plan["flows"][0]["start_ns"] = 10**9
    for f in plan["flows"][1:]:
        f["stop_ns"] = 2 * 10**9
    m = collect.Measured(duration_ns=4 * 10**9, agent_offset_s=1.5)
    received = {"0": {"bytes": 30 * 300_000, "bins": {str(b): 300_000 for b in range(10, 40)},
                      "done_ns": None}}
    for i in (1, 2, 3):
        received[str(i)] = {"bytes": 20 * 400_000,
                            "bins": {str(b): 400_000 for b in range(20)}, "done_ns": None}
    m.traffic = {4: {"vm": 4, "received": received, "sent": {}},
                 0: {"vm": 0, "received": {}, "sent": {"0": {
                     "bytes": 9_100_000, "retransmits": 12, "timeouts": 2, "error": None}}}}
    m.counters_start = {8: {"tx_bytes": 1000, "tx_pkts": 10}}
    m.counters_end = {8: {"tx_bytes": 48_001_000, "tx_pkts": 32_010, "dropped_overflow": 900,
                          "dropped_aqm": 0, "backlog_pkts": 40, "backlog_bytes": 60_000}}
    m.queue_samples = [(t / 10, 8, 100, 150_000) for t in range(40)]
    # The agents' clocks start 1.5 s before the flows'; their counters are cumulative.
    m.agent_ports = [
        {"time_s": str(t), "port": "sw0->r0", "tx_bytes": "0", "tx_pkts": "0",
         "marks": str(marks), "aqm_drops": str(drops), "queue_bytes": "0"}
        for t, marks, drops in ((1.0, 1, 0), (1.5, 2, 0), (5.4, 321, 40), (6.0, 400, 50))
    ]
    m.agent_hosts = [{"time_s": "2.0", "vm": "s0", "dst": "r0", "rate_mbps": "25"}]
    return m


def test_a_ports_utilization_is_over_the_time_between_its_own_readings(
        plan: dict[str, Any]) -> None:
    """The namespaces' counters are read one after another, seconds apart where the machine
    is saturated: a port's bytes count over the time between its own two readings, not the
    run's (2 s of 100 Mb/s read 1 s apart is 100% of the port, whatever the run's span)."""
    m = _measured(plan)
    rate = plan["ports"][8]["rate_bps"] * 0.1
    m.counters_start[8]["read_ns"] = 3 * 10**9
    m.counters_end[8] = dict(m.counters_end[8], tx_bytes=1000 + round(rate / 8 * 2),
                             read_ns=5 * 10**9)

    port = collect.port_summaries(plan, m, 0.1)[8]

    assert port["utilization"] == pytest.approx(1.0, rel=1e-6)


def _write(plan: dict[str, Any], out: Path) -> Path:
    m = _measured(plan)
    flows = collect.flow_summaries(plan, m, {"newreno": "reno"})
    tb = {"rate_scale": 0.1, "base_rtt_us": 85.0, "not_emulated": ["link delays"],
          "failures": [], "agents": collect.agent_totals(plan, m)}
    summary = collect.summary(plan, m, flows, scale=0.1, scenario_file="motivating.toml",
                              wall_seconds=6.0, sample_interval_ns=10**8, testbed=tb)
    return collect.write_results(out, plan, m, summary, flows)


def test_results_are_in_the_engines_formats(plan: dict[str, Any], tmp_path: Path) -> None:
    out = _write(plan, tmp_path / "tb")

    assert (out / "flows.csv").read_text().splitlines()[0] == ENGINE_FLOWS_HEADER
    summary = read_summary(out)
    tagged, udp = summary["flows"][0], summary["flows"][1]
    assert tagged["goodput_mbps"] == pytest.approx(9e6 * 8 / 3 / 1e6)  # 3 s active
    assert (tagged["retransmits"], tagged["timeouts"], tagged["linux_cc"]) == (12, 2, "reno")
    assert (udp["end"], udp["goodput_mbps"]) == (2.0, pytest.approx(8e6 * 8 / 2 / 1e6))
    assert (udp["send_errors"], "send_errors" in tagged) == (0, False)
    port = summary["ports"][8]
    assert (port["name"], port["rate_bps"], port["tx_bytes"]) == ("sw0->r0", 10**8, 48 * 10**6)
    assert (port["dropped"], port["marked"], port["max_backlog_pkts"]) == (900, 319, 100)
    assert summary["testbed"]["agents"] == {"marks": 319, "aqm_drops": 40}
    assert port["utilization"] == pytest.approx(0.96)
    result = tacc.load(out)
    goodput = result.goodput[result.goodput["flow"] == "tagged"]
    assert goodput["time_s"].min() == pytest.approx(1.0)  # from its start bin
    assert len(goodput) == 30 and (goodput["goodput_mbps"] > 0).all()
    assert list(result.queues["port"].unique()) == ["sw0->r0"]
    # The host agent's row at 2.0 s on its clock is 0.5 s on the flows' clock.
    assert result.rates.to_dict("records") == [
        {"time_s": 0.5, "vm": "s0", "dst": "r0", "rate_mbps": 25.0}]


def test_show_and_plot_read_a_testbed_result_unchanged(plan: dict[str, Any],
                                                       tmp_path: Path) -> None:
    out = _write(plan, tmp_path / "tb")

    table = summary_table(read_summary(out))
    written = plot_dir(out)

    assert "packet conservation: not measured on a testbed" in table
    assert "testbed: emulated 4.000s in 6.000s wall, rates as measured at x0.1" in table
    assert "  not emulated: link delays" in table
    assert sorted(p.name for p in written) == ["goodput.png", "queues.png", "rates.png"]


def test_a_sized_flow_completes_at_its_last_byte(plan: dict[str, Any]) -> None:
    plan["flows"][0].update(bytes=1_000_000, start_ns=10**9)
    m = collect.Measured(duration_ns=4 * 10**9)
    m.traffic = {4: {"vm": 4, "sent": {}, "received": {"0": {
        "bytes": 1_000_000, "bins": {"10": 1_000_000}, "done_ns": 1_250_000_000}}}}

    tagged = collect.flow_summaries(plan, m, {})[0]

    assert (tagged["completed"], tagged["end"], tagged["fct"]) == (True, 1.25, 0.25)
    assert tagged["goodput_mbps"] == pytest.approx(8e6 / 0.25 / 1e6)


# --- root, namespaces, qdiscs -------------------------------------------------------------


@pytest.fixture
def names() -> Any:
    made = Names(secrets.token_hex(2))
    yield made
    assert topology.teardown(made) == []


def _traffic_process(names: Names, tmp_path: Path, **flows: Any) -> Any:
    """Starts a traffic process in a namespace of its own (loopback only)."""
    ns = names.vm(0)
    subprocess.run(["ip", "netns", "add", ns], check=True)
    subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
    spec = {"vm": 0, "address": "127.0.0.1", "seed": 1, "bin_ns": 100_000_000,
            "rcv_buf_bytes": 1_000_000, "out": str(tmp_path / "out.json"),
            "ready": str(tmp_path / "ready"), "go": str(tmp_path / "go"),
            "listening": str(tmp_path / "listening"), "connected": str(tmp_path / "connected"),
            "connect_s": 1.0,
            "sinks": [],
            "sources": [], "triggered": [], "aggregators": [], "workers": [], **flows}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    env = dict(os.environ, PYTHONPATH=str(Path(tacc.__file__).resolve().parents[1]))
    return subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-m",
                             "tacc.testbed.traffic", str(tmp_path / "spec.json")],
                            env=env, stderr=subprocess.PIPE, text=True)


def _traffic(names: Names, tmp_path: Path, duration_s: float, **flows: Any) -> Any:
    """Starts a traffic process (_traffic_process) and, once it is ready, its clock."""
    proc = _traffic_process(names, tmp_path, **flows)
    deadline = time.monotonic() + 10
    while not (tmp_path / "ready").exists():
        assert proc.poll() is None and time.monotonic() < deadline, "traffic not ready"
        time.sleep(0.01)
    t0 = time.monotonic_ns() + 100_000_000
    clock = {"start_mono_ns": t0, "end_mono_ns": t0 + round(duration_s * 1e9)}
    (tmp_path / ".go").write_text(json.dumps(clock))
    os.replace(tmp_path / ".go", tmp_path / "go")
    return proc


def _tcp(flow: int, port: int, **kw: Any) -> dict[str, Any]:
    return {"flow": flow, "transport": "tcp", "dst": "127.0.0.1", "dst_port": port,
            "src_port": 30000 + flow, "start_ns": 0, "stop_ns": None, "bytes": None,
            "cc": "reno", "ecn": False, "rate_bps": None, "packet_bytes": None, **kw}


@pytest.mark.testbed
def test_the_traffic_process_sends_and_counts(testbed_machine: None, names: Names,
                                              tmp_path: Path) -> None:
    # Flows share receiving ports, as the engine's do: the senders tell them apart.
    udp = {"transport": "udp", "cc": None, "rate_bps": 10_000_000, "packet_bytes": 1500,
           "stop_ns": 500_000_000}
    sources = [
        _tcp(0, 5001, bytes=2_000_000),
        _tcp(1, 5001, stop_ns=300_000_000),
        _tcp(2, 9, **udp),
        _tcp(3, 9, **udp),
    ]
    sinks = [{"flow": s["flow"], "transport": s["transport"], "port": s["dst_port"],
              "src": "127.0.0.1", "src_port": s["src_port"], "bytes": s["bytes"]}
             for s in sources]

    proc = _traffic(names, tmp_path, 1.0, sinks=sinks, sources=sources)
    _, err = proc.communicate(timeout=30)

    assert proc.returncode == 0, err
    records = json.loads((tmp_path / "out.json").read_text())
    rx, tx = records["received"], records["sent"]
    assert rx["0"]["bytes"] == 2_000_000 and rx["0"]["done_ns"] is not None
    assert rx["1"]["bytes"] > 0 and rx["1"]["done_ns"] is None
    udp_bytes = 10e6 / 8 * 0.5 * 1472 / 1500
    assert rx["2"]["bytes"] == pytest.approx(udp_bytes, rel=0.15)
    assert rx["3"]["bytes"] == pytest.approx(udp_bytes, rel=0.15)
    for flow in rx.values():
        assert sum(flow["bins"].values()) == flow["bytes"]
    assert [tx[f]["error"] for f in "0123"] == [None] * 4
    assert tx["0"]["bytes"] == 2_000_000 and tx["0"]["retransmits"] == 0


@pytest.mark.testbed
def test_an_aggregator_that_cannot_reach_a_worker_says_so(testbed_machine: None, names: Names,
                                                        tmp_path: Path) -> None:
    """A worker the aggregator cannot reach once every worker should listen fails its
    process, so the run, naming the worker: not an incast that silently never ran."""
    proc = _traffic_process(names, tmp_path, aggregators=[
        {"app": 0, "start_ns": 50_000_000, "interval_ns": None, "port": 4000,
         "workers": ["127.0.0.1"], "flows": [[0]]}])
    deadline = time.monotonic() + 10
    while not (tmp_path / "ready").exists():
        assert proc.poll() is None and time.monotonic() < deadline, "traffic not ready"
        time.sleep(0.01)
    (tmp_path / "listening").touch()
    _, err = proc.communicate(timeout=30)

    assert proc.returncode == 1
    assert not (tmp_path / "connected").exists()
    assert err.strip() == ("incast aggregator of app 0: worker 127.0.0.1 unreachable after "
                           "1s: [Errno 111] Connection refused"), err


@pytest.mark.testbed
def test_the_traffic_process_writes_its_records_on_sigterm(
    testbed_machine: None, names: Names, tmp_path: Path
) -> None:
    sources = [_tcp(0, 20000)]
    proc = _traffic(names, tmp_path, 60.0, sources=sources,
                    sinks=[{"flow": 0, "transport": "tcp", "port": 20000, "src": "127.0.0.1",
                            "src_port": 30000, "bytes": None}])
    time.sleep(1.5)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=10)

    assert proc.returncode == 0
    assert json.loads((tmp_path / "out.json").read_text())["received"]["0"]["bytes"] > 0


@pytest.mark.testbed
def test_the_topology_forwards_and_queues_as_planned(testbed_machine: None, names: Names,
                                                     plan: dict[str, Any]) -> None:
    topo = topology.build(plan, names, 0.1)

    assert topo.port_devices[8] == (names.switch(0), "p8")
    assert topo.port_devices[9] == (names.host(4), "up0")
    assert not topo.wires
    rtts = run.measure_base_rtt(plan, names, 0.1)  # s0 reaches r0 through sw0
    assert rtts is not None and rtts[0] > 0
    qdiscs = json.loads(subprocess.run(["tc", "-n", names.switch(0), "-j", "qdisc", "show",
                                        "dev", "p8"], capture_output=True, check=True,
                                       text=True).stdout)
    assert [(q["kind"], q["handle"]) for q in qdiscs] == [("htb", "1:"), ("bfifo", "2:")]
    assert qdiscs[1]["options"]["limit"] == 150_000
    classes = subprocess.run(["tc", "-n", names.switch(0), "class", "show", "dev", "p8"],
                             capture_output=True, check=True, text=True).stdout
    assert "rate 100Mbit ceil 100Mbit" in classes
    ecn = subprocess.run(["ip", "netns", "exec", names.vm(0), "sysctl", "-n",
                          "net.ipv4.tcp_ecn"], capture_output=True, check=True, text=True)
    assert ecn.stdout.strip() == "2"


def _two_path_plan(plan: dict[str, Any]) -> dict[str, Any]:
    """Two switches joined by two links (ECMP both ways); host h0 runs VMs v0 and v1 on
    sw0, host h1 runs v2 on sw1."""
    def port(name: str, a: dict[str, int], b: dict[str, int]) -> dict[str, Any]:
        return dict(plan["ports"][0], name=name, **{"from": a, "to": b})

    h0, h1, sw0, sw1 = {"host": 0}, {"host": 1}, {"switch": 0}, {"switch": 1}
    ports = [port("h0->sw0", h0, sw0), port("sw0->h0", sw0, h0),
             port("sw0->sw1.a", sw0, sw1), port("sw1->sw0.a", sw1, sw0),
             port("sw0->sw1.b", sw0, sw1), port("sw1->sw0.b", sw1, sw0),
             port("sw1->h1", sw1, h1), port("h1->sw1", h1, sw1)]
    vms = [{"name": "h0/0", "host": 0, "address": "10.0.0.1"},
           {"name": "h0/1", "host": 0, "address": "10.0.0.2"},
           {"name": "h1", "host": 1, "address": "10.0.0.3"}]
    routes = [{"switch": 0, "vm": 0, "ports": [1]}, {"switch": 0, "vm": 1, "ports": [1]},
              {"switch": 0, "vm": 2, "ports": [2, 4]}, {"switch": 1, "vm": 2, "ports": [6]},
              {"switch": 1, "vm": 0, "ports": [3, 5]}, {"switch": 1, "vm": 1, "ports": [3, 5]}]
    flow = dict(plan["flows"][0], src_vm=0, dst_vm=2)
    return dict(plan, hosts=[{"name": "h0", "nic_port": 0}, {"name": "h1", "nic_port": 7}],
                vms=vms, switches=[{"name": "sw0"}, {"name": "sw1"}], ports=ports,
                routes=routes, flows=[flow], output=dict(plan["output"], ports=[2]))


@pytest.mark.testbed
def test_two_paths_and_two_vms_on_a_host(testbed_machine: None, names: Names,
                                        plan: dict[str, Any]) -> None:
    two_paths = _two_path_plan(plan)
    plans.check_plan(two_paths)
    topology.build(two_paths, names, 0.1)

    rtts = run.measure_base_rtt(two_paths, names, 0.1)  # v0 -> v2 across either link
    assert rtts is not None and rtts[0] > 0
    for src, dst in ((1, "10.0.0.3"), (1, "10.0.0.1")):  # and to the VM on its own host
        ping = subprocess.run(["ip", "netns", "exec", names.vm(src), "ping", "-n", "-c", "1",
                               "-W", "1", dst], capture_output=True, text=True)
        assert ping.returncode == 0, ping.stdout
    routes = subprocess.run(["ip", "-n", names.switch(0), "route", "show", "10.0.0.3"],
                            capture_output=True, check=True, text=True).stdout
    assert "nexthop dev p2" in routes and "nexthop dev p4" in routes
    policy = subprocess.run(["ip", "netns", "exec", names.switch(0), "sysctl", "-n",
                             "net.ipv4.fib_multipath_hash_policy"],
                            capture_output=True, check=True, text=True)
    assert policy.stdout.strip() == "1"


@pytest.mark.testbed
def test_approximate_runs_the_scenario_and_lists_each_departure(testbed_machine: None,
                                                                tmp_path: Path) -> None:
    path = _four_flows_with(tmp_path, "dupthresh = 5\n")
    out = tmp_path / "out"

    assert cli.main(["testbed", str(path), "--out", str(out), "--duration", "0.3s", "--quiet",
                     "--no-plot", "--approximate"]) == 0

    notes = json.loads((out / "summary.json").read_text())["testbed"]["not_emulated"]
    assert notes[:2] == [
        f"{path}:23: tcp.dupthresh: Linux's duplicate-ACK threshold is 3 (tcp_reordering), "
        "with RACK's time-based loss detection, not set",
        f"{path}:33: output.queue_sample: queues.csv is sampled every 100ms at most often",
    ]


@pytest.mark.testbed
def test_the_cpu_is_sampled_each_second_while_the_runs_readings_wait(
        testbed_machine: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The machine's idle share is read each second of the traffic even while the run's
    own reading of the port counters waits (for the kernel's rtnl lock, which a process a
    saturated machine leaves without a core can hold for seconds): here the first reading
    takes 2.5 s of a 3 s run, and the 3 seconds are still sampled."""
    read = collect.port_counters
    calls = []

    def slow_first(devices: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            time.sleep(2.5)
        return read(devices)

    monkeypatch.setattr(collect, "port_counters", slow_first)
    out = tmp_path / "out"
    assert cli.main(["testbed", str(DATA / "four-flows.toml"), "--out", str(out),
                     "--duration", "3s", "--quiet", "--no-plot"]) == 0

    cpu = read_summary(out)["testbed"]["cpu"]
    assert cpu["samples"] == 3, cpu
    assert 0.0 <= cpu["idle_min"] <= cpu["idle_mean"] <= 1.0, cpu
    assert 0.0 <= cpu["steal_max"] <= 1.0, cpu
    # A second holds 1000 ms of a core's time; its softirq thread waits for part of it.
    assert 0.0 <= cpu["softirq_wait_max_ms"] <= 1000.0, cpu
    with (out / "cpu.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [float(r["time_s"]) for r in rows] == [0.0, 1.0, 2.0]
    assert max(float(r["softirq_wait_ms"]) for r in rows) == cpu["softirq_wait_max_ms"]


@pytest.mark.testbed
def test_a_thread_kept_from_its_core_reads_the_time_it_waited(testbed_machine: None) -> None:
    """What cpu.csv's softirq_wait_ms reads of the kernel's softirq threads, read of a thread
    of our own: pinned to core 0 behind a real-time process that holds that core for 300 ms,
    it waits that long, and no longer than the whole span read."""
    def on_core_0() -> None:
        os.sched_setaffinity(0, {0})

    def on_core_0_first() -> None:
        on_core_0()
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(shell.APPLICATION_PRIORITY))

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs a second core for the test itself")
    spin = [sys.executable, "-c", "import sys, time\nend = time.monotonic() + float(sys.argv[1])"
            "\nwhile time.monotonic() < end: pass", "30"]
    waiter = subprocess.Popen(spin, preexec_fn=on_core_0)
    try:
        time.sleep(0.2)
        before, t0 = collect.run_delays([waiter.pid]), time.monotonic()
        subprocess.run([*spin[:-1], "0.3"], preexec_fn=on_core_0_first, check=True, timeout=30)
        after, span = collect.run_delays([waiter.pid]), time.monotonic() - t0
    finally:
        waiter.kill()
        waiter.wait()
    assert before and after, "the kernel keeps no scheduler statistics"
    waited = (after[0] - before[0]) / 1e9
    assert 0.3 <= waited <= span, f"waited {waited:.3f} s of {span:.3f} s"
    assert len(collect.softirq_threads()) == os.cpu_count()


@pytest.mark.testbed
@pytest.mark.parametrize(("sets", "delay_us", "scale"), [
    ([], 25.0, 0.1),
    (["--set", 'topology.link_delay="100us"', "--rate-cap", "50Mbps"], 100.0, 0.05),
], ids=["25us-x0.1", "100us-x0.05"])
def test_links_delay_packets_by_the_scenarios_delay_dilated_by_the_rate_scale(
    testbed_machine: None, tmp_path: Path, sets: list[str], delay_us: float, scale: float,
) -> None:
    """Four-flows is a star at 1 Gb/s: a ping crosses four links, each its delay and 84 B
    of serialization, all dilated by the rate scale. The wire takes the namespaces' own
    latency (about 100 us) out of the links' delays, so that the base RTT is the
    scenario's: within 10%."""
    out = tmp_path / "out"
    argv = ["testbed", str(DATA / "four-flows.toml"), "--out", str(out), "--duration", "0.3s",
            "--quiet", "--no-plot", "--link-delays", *sets]

    assert cli.main(argv) == 0

    tb = json.loads((out / "summary.json").read_text())["testbed"]
    expected_us = 4 * (delay_us + 84 * 8 / 1e9 * 1e6) / scale
    assert tb["scenario_base_rtt_us"] == pytest.approx(expected_us, rel=1e-6)
    assert tb["base_rtt_us"] == pytest.approx(expected_us, rel=0.10)


@pytest.mark.testbed
@pytest.mark.parametrize("failure", [RuntimeError("injected"), run.Interrupted()])
def test_a_failing_run_leaves_nothing_behind(
    testbed_machine: None, plan: dict[str, Any], failure: BaseException,
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    """The failure comes after the build, with a process left in a VM and an agent's BPF
    directory pinned: teardown removes them all."""
    seen: dict[str, Any] = {}

    def fail_after_build(_plan: dict[str, Any], names: Names, _scale: float) -> float:
        names.bpffs.mkdir()
        seen["names"] = names
        seen["stray"] = subprocess.Popen(["ip", "netns", "exec", names.vm(0), "sleep", "60"])
        seen["namespaces"] = topology.run_namespaces(names.prefix)
        raise failure

    monkeypatch.setattr(features, "agent_problems", lambda: [])
    monkeypatch.setattr(run, "measure_base_rtt", fail_after_build)

    with pytest.raises(type(failure)):
        run.run_plan(plan, run.Options(out=tmp_path / "out", quiet=True))

    names = seen["names"]
    assert len(seen["namespaces"]) == 11  # the switch, 5 hosts, 5 VMs were there
    assert topology.run_namespaces(names.prefix) == []
    assert not names.bpffs.exists()
    assert not run._run_dir(names.run_id).exists()
    assert seen["stray"].wait(timeout=5) is not None
    assert not (tmp_path / "out").exists()


@pytest.mark.testbed
def test_cleanup_removes_what_a_dead_run_left(testbed_machine: None,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    names = Names(secrets.token_hex(2))
    subprocess.run(["ip", "netns", "add", names.switch(0)], check=True)
    names.bpffs.mkdir()

    assert cli.main(["testbed", "--cleanup"]) == 0

    assert f"run {names.run_id}: 1 namespaces" in capsys.readouterr().out.splitlines()
    assert topology.run_namespaces(names.prefix) == [] and not names.bpffs.exists()


@pytest.mark.testbed
@pytest.mark.parametrize("link_rate", [100e6, 1e9], ids=["100Mbps", "1Gbps-dilated"])
def test_partition_aggregate_runs_epoch_after_epoch(testbed_machine: None, tmp_path: Path,
                                                    link_rate: float) -> None:
    """Ten epochs of 8 answers of 64 KB, each epoch asked for when the last one's answers
    are all in: every answer complete, no epoch faster than its bytes through the
    aggregator's port, and none starting before the last one ended. At 1 Gb/s the testbed
    runs the links at 100 Mb/s and its time ten times slower; the result is in the
    scenario's time, so the epochs take about a tenth of the 100 Mb/s run's."""
    dilated = link_rate > 100e6
    out = run.run_testbed(
        INCAST_SMALL, [("topology.link_rate", f'"{link_rate / 1e6:g}Mbps"')],
        run.Options(out=tmp_path / "out", quiet=True, duration_s=0.6 if dilated else None))

    summary = json.loads((out / "summary.json").read_text())
    assert summary["testbed"]["time_dilation"] == pytest.approx(10.0 if dilated else 1.0)
    epochs: dict[int, list[dict[str, str]]] = {}
    for row in collect.read_csv(out / "flows.csv"):
        app, _, epoch = row["name"].split(".")
        assert app == "query" and row["dst"] == "r0"
        epochs.setdefault(int(epoch), []).append(row)
    assert sorted(epochs) == list(range(10))
    wire_s = 8 * 64_000 / SEGMENT_DATA * SEGMENT_S * 100e6 / link_rate  # 42.4 ms at 100 Mb/s
    last_end = 0.0
    took = []
    for epoch, rows in sorted(epochs.items()):
        assert sorted(r["src"] for r in rows) == [f"s{i}" for i in range(8)]
        assert all(r["completed"] == "true" and int(r["bytes_delivered"]) == 64_000
                   for r in rows), rows
        start, end = min(float(r["start"]) for r in rows), max(float(r["end"]) for r in rows)
        assert start >= last_end, (epoch, start, last_end)
        # htb lets a burst of a few packets through above the rate: 5%
        assert end - start >= 0.95 * wire_s, (epoch, end - start)
        took.append(end - start)
        last_end = end
    if dilated:
        # In real time an epoch takes at least 42.4 ms at the testbed's 100 Mb/s: under
        # that, its times were put back in the scenario's.
        assert statistics.median(took) < 0.95 * 10 * wire_s, took
        assert last_end < 0.6


@pytest.mark.testbed
def test_open_loop_flows_are_the_engines_flows(testbed_machine: None, tmp_path: Path) -> None:
    """The web-search source sends the very flows the engine draws for the seed (names,
    endpoints, sizes, start times), and each is timed as the engine times it: no flow
    faster than its bytes at the line rate (but for the frames a port's HTB burst lets pass
    at once), and every short flow (100 KB at most) that starts half a second before the end
    completes."""
    out = run.run_testbed(WEBSEARCH_SMALL, [], run.Options(out=tmp_path / "out", quiet=True))

    rows = {r["name"]: r for r in collect.read_csv(out / "flows.csv")}
    drawn = apps.workload(WEBSEARCH_SMALL, [])
    vms = [vm["name"] for vm in plans.load_plan(WEBSEARCH_SMALL)["vms"]]
    assert list(rows) == [w["name"] for w in drawn] and len(drawn) > 50
    for w in drawn:
        row = rows[w["name"]]
        assert (row["src"], row["dst"]) == (vms[w["src_vm"]], vms[w["dst_vm"]])
        assert float(row["start"]) == pytest.approx(w["start_ns"] / 1e9, abs=1e-9)
        if row["completed"] == "true":
            assert int(row["bytes_delivered"]) == w["bytes"]
            frames = w["bytes"] / SEGMENT_DATA - BURST_FRAMES
            assert float(row["fct"]) >= 0.95 * frames * SEGMENT_S, row
        elif w["bytes"] <= 100_000:
            assert w["start_ns"] > 2.5e9, row


@pytest.mark.testbed
def test_partition_aggregate_at_an_interval_starts_each_epoch_on_time(testbed_machine: None,
                                                                      tmp_path: Path) -> None:
    """With `interval`, epoch e is asked for at start + e x interval whether or not the last
    one's answers are in: every epoch's first answer starts within 5 ms of it (the request's
    trip, a worker's wake-up and the least of 8 draws of 100 us mean), and answers of 512 KB
    that need 42 ms through the port overlap the next epoch at 30 ms."""
    sets = [("incast[0].interval", '"30ms"'), ("incast[0].epochs", "6")]
    out = run.run_testbed(INCAST_SMALL, sets, run.Options(out=tmp_path / "out", quiet=True))

    starts: dict[int, list[float]] = {}
    ends: dict[int, list[float]] = {}
    for row in collect.read_csv(out / "flows.csv"):
        epoch = int(row["name"].split(".")[2])
        starts.setdefault(epoch, []).append(float(row["start"]))
        ends.setdefault(epoch, []).append(float(row["end"]))
    assert sorted(starts) == list(range(6))
    for epoch, at in sorted(starts.items()):
        asked = 0.1 + 0.03 * epoch
        assert asked <= min(at) <= asked + 0.005, (epoch, min(at), asked)
    assert any(max(ends[e]) > min(starts[e + 1]) for e in range(5))
