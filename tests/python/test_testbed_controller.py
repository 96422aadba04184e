"""The SDN side on the testbed: Open vSwitch bridges driven by the os-ken controller app
(tacc.testbed.controller) running the mechanisms' controller roles from tacc-mech.

- SDN-ECN on its paper's Topology 1, shortened (data/short-next-to-bulk.toml): the short flow
  finishes sooner and the queue stays short, as in the simulator; the marking rules are seen
  with `ovs-ofctl dump-flows` while the bulk flows run and are gone one hard timeout after.
- SDN-GCC on three tenants of one port (data/sdn-gcc-three-tenants.toml): the TCP tenant
  gets a share near the fair third next to two UDP tenants, the median of three runs within
  0.05 of the simulator's, from the controller's notifications; and on two ports, each
  with a TCP and a UDP tenant (data/sdn-gcc-two-bottlenecks.toml), each TCP tenant its share.
- SICC on the dumbbell shortened (data/incast-over-elephants.toml), its controller without
  OpenFlow beside Linux switches: the mice finish sooner (the median of three paired ratios
  below the model's bound) and the elephants keep the link.
- The controller restarted mid-run finds its switches again and resumes; a switch restarted
  mid-run gets its rules back; garbage on the controller's port is logged and survived.
- Everything is torn down, also when the controller dies.

Marked `testbed` (root, namespaces, tc, eBPF, Open vSwitch, os-ken): skipped naming what is
missing, or failed with TACC_REQUIRE_TESTBED=1.
"""

from __future__ import annotations

import csv
import json
import socket
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tacc.summary import read_summary
import tacc
from tacc.testbed import collect, repeat, run, shell, topology
from tacc.testbed import plan as plans
from tacc.testbed import TestbedError as Failed
from tacc.testbed.topology import Names

DATA = Path(__file__).parent / "data"
SHORT = DATA / "short-next-to-bulk.toml"
THREE_TENANTS = DATA / "sdn-gcc-three-tenants.toml"
TWO_BOTTLENECKS = DATA / "sdn-gcc-two-bottlenecks.toml"
INCAST = DATA / "incast-over-elephants.toml"
RACKS_ECMP = DATA / "racks-ecmp.toml"
SDN_ECN = ("mechanism", '{kind="sdn-ecn",interval="500ms",rule_timeout="1s"}')

pytestmark = pytest.mark.testbed



def run_it(tmp_path: Path, scenario: Path, sets: list[tuple[str, str]],
            **options: Any) -> Path:
    out = tmp_path / "out"
    run.run_testbed(scenario, sets, run.Options(out=out, quiet=True, **options))
    assert_correct_bytes(read_summary(out))
    return out


def assert_correct_bytes(summary: dict[str, Any]) -> None:
    """No checksum error in any namespace: every rewrite left its packets whole."""
    errors = summary["testbed"]["checksum_errors"]
    assert not {ns: c for ns, c in errors.items() if any(c.values())}


def flow_row(out: Path, name: str) -> dict[str, str]:
    with (out / "flows.csv").open(newline="") as f:
        return next(r for r in csv.DictReader(f) if r["name"] == name)


def mean_backlog(out: Path, port: str) -> float:
    return next(p for p in read_summary(out)["ports"] if p["name"] == port)["mean_backlog_pkts"]


class Flows:
    """`ovs-ofctl dump-flows` of switch 0 every 100 ms of a run: (time since the flows'
    start, the rules)."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, list[str]]] = []

    def __call__(self, names: Names, workdir: Path, t0: int) -> None:
        switches = run.running(workdir).switches
        assert switches is not None
        while (now := time.monotonic_ns()) < t0 + 6_300_000_000:
            self.seen.append(((now - t0) / 1e9, switches.dump_flows(0)))
            time.sleep(0.1)


def marking(rules: list[str]) -> list[str]:
    return [r for r in rules if "set_field:3->nw_ecn" in r]


def test_sdn_ecn_shortens_the_short_flow_and_its_rules_expire(ovs_machine: None,
                                                               tmp_path: Path) -> None:
    """Paper 004, Topology 1: the 2 MB flow next to Cubic bulk flows behind 1000 packets of
    drop-tail takes 10.6 s without marking and 0.34 s with SDN-ECN. Shortened here (2 bulk
    flows, 0-4 s): without a mechanism it waits behind a standing queue of hundreds of
    packets; SDN-ECN's rules mark the bulk flows and the queue stays short."""
    base = run_it(tmp_path / "none", SHORT, [])
    flows = Flows()
    # Judged on the median of three runs. The probes (every 0.5 s) fall where the
    # simulator's do (the controller's clock starts with the flows) and rank the flows by
    # counters at most 0.1 s old (OVS's max-revalidator): six runs gave 0.35-0.38 s, the
    # simulator 0.39 s (0.36 s with tcp.profile = "linux"). Before, a random phase and
    # counters up to 0.5 s old made it bimodal: 0.29-0.37 s or 0.79-0.83 s.
    runs = [run_it(tmp_path / f"sdn-ecn-{i}", SHORT, [SDN_ECN],
                   during=flows if i == 0 else None) for i in range(3)]
    ecn = runs[0]
    assert read_summary(ecn)["testbed"]["switches"] == "ovs"
    fct_base = float(flow_row(base, "short")["fct"])
    fct_ecn = statistics.median(float(flow_row(r, "short")["fct"]) for r in runs)
    # With the bulk flows marked the short flow gets a third of the link: 2 MB at 33 Mb/s
    # is 0.48 s, within 35%. Without a mechanism the bulk flows hold 250-410 packets (30-50
    # ms a round trip) and the short flow took 0.68-1.02 s in runs where they never
    # overflowed the buffer (0 drops), 2.6-2.7 s where they did.
    assert fct_ecn < min(1.35 * 0.48, fct_base), (
        f"FCT {fct_ecn:.3f}s with SDN-ECN (median of 3), {fct_base:.3f}s without")
    # SDN-ECN's queue: 51-70 packets on average, against 250-410 without.
    assert statistics.median(mean_backlog(r, "sw0->r0") for r in runs) < \
        0.5 * mean_backlog(base, "sw0->r0")
    # The rules: seen while the bulk flows run, with their 1 s hard timeout, and gone once
    # a probe (every 0.5 s) has found no congestion for a timeout (flows stop at 4 s).
    during = [t for t, rules in flows.seen if 1.0 <= t < 4.0 and marking(rules)]
    assert during, "no marking rule seen in dump-flows while the bulk flows ran"
    sample = next(marking(rules) for t, rules in flows.seen if t == during[0])[0]
    assert "hard_timeout=1" in sample and "table=1" in sample, sample
    late = [t for t, rules in flows.seen if t >= 5.6 and marking(rules)]
    assert not late, f"marking rules still installed at {late}"
    summary = read_summary(ecn)
    assert summary["control"]["rules_expired"] >= 1
    assert summary["control"]["rules_installed"] >= 1
    assert summary["mechanism"]["control_messages"]["stats_request"] >= 8  # 0.5 s probes


def share_between(out: Path, flow: str, start: float, end: float) -> float:
    """A flow's mean goodput over [start, end) as a share of its 1 Gb/s bottleneck, at the
    rate the run ran it (the scenario's times the testbed's scale)."""
    scale = read_summary(out).get("testbed", {}).get("rate_scale", 1.0)
    with (out / "goodput.csv").open(newline="") as f:
        bins = [float(r["goodput_mbps"]) for r in csv.DictReader(f)
                if r["flow"] == flow and start <= float(r["time_s"]) < end]
    return sum(bins) / len(bins) / (1000.0 * scale)


SDN_GCC = ("mechanism", '{kind="sdn-gcc",on_shortage="queue",decrease="multiplicative"}')


def sdn_gcc_shares(tmp_path: Path, scenario: Path, flows: list[str], start: float,
                   end: float, **options: Any
                   ) -> tuple[dict[str, float], dict[str, list[float]], list[Any]]:
    """SDN-GCC's shares of `flows` over [start, end): the simulator's, and three testbed
    runs' (with `options`), each run's controller seen to poll and notify; and the runs
    that saturated the machine (they measure the machine: said in failure messages)."""
    sim = tacc.run(scenario, sets=[SDN_GCC], out=tmp_path / "sim", progress=False).dir
    expected = {f: share_between(sim, f, start, end) for f in flows}
    runs = repeat.run_repeated(scenario, [SDN_GCC],
                               run.Options(out=tmp_path / "tb", quiet=True, **options), 3)
    for d in repeat.run_dirs(runs):
        summary = read_summary(d)
        assert_correct_bytes(summary)
        sent = summary["mechanism"]["control_messages"]
        assert sent["host_message"] > 0 and sent["stats_request"] > 0, sent
    shares = {f: [share_between(d, f, start, end) for d in repeat.run_dirs(runs)] for f in flows}
    return expected, shares, repeat.read_header(runs)["saturated"]


def test_sdn_gcc_gives_the_tcp_tenant_its_share_next_to_two_udp_tenants(
        ovs_machine: None, tmp_path: Path) -> None:
    """Paper 000's claim on three tenants of one port (data/sdn-gcc-three-tenants.toml: a
    Cubic flow from 1 s against two UDP flows at 70% of line rate): the controller polls the
    port's marks and has the hypervisors cut the senders behind it, so the TCP tenant gets a
    share of the port near the fair third, on Linux as in the simulator. The cut is in
    proportion to the rate (decrease = "multiplicative"): Algorithm 3's additive cut keeps
    whatever lead a rate had, and the simulator's rates then settle unevenly. The median of
    three runs is judged (one run is one sample of a noisy system): within 0.05 of the
    simulator's share, and above 0.75 of the fair share (the simulator's 0.26 is below a
    third because the rates saw under the controller's 5 ms polls: 79% of the port used).
    At 100 Mb/s five runs gave 0.274-0.282 (simulator 0.262-0.266 over five seeds); before the
    mechanism's clock was dilated on the testbed, 0.20-0.23 with its timers in real time
    against queues ten times slower (docs/testbed.md)."""
    # At a 50 Mb/s cap: at 100 Mb/s the runs left under a tenth of the CPU idle for 2-5 s of
    # 6 and a clean checkout's suite gave 0.229-0.255 (median under 0.75 of fair); at 50 Mb/s
    # five runs gave 0.289-0.300 with no second saturated (docs/testbed.md).
    expected, shares, saturated = sdn_gcc_shares(tmp_path, THREE_TENANTS, ["tcp"], 1.5, 6.0,
                                                 rate_cap_bps=50e6)
    median = statistics.median(shares["tcp"])
    fair = 1 / 3
    said = f"testbed {shares}, saturated {saturated}"
    assert abs(median - expected["tcp"]) <= 0.05, f"{said}, simulator {expected}"
    assert expected["tcp"] >= 0.75 * fair, f"simulator {expected} of the port (fair {fair:.3f})"
    assert median >= 0.75 * fair, f"{said} of the port (fair {fair:.3f})"


def test_sdn_gcc_gives_each_tcp_tenant_its_share_at_two_bottlenecks(
        ovs_machine: None, tmp_path: Path) -> None:
    """Two ports, each a NewReno tenant from 1 s against a UDP tenant at line rate
    (data/sdn-gcc-two-bottlenecks.toml): the controller finds which sources are behind which
    port and cuts only those, so each TCP tenant gets its share of its own port, as in the
    simulator. The simulator gives each 0.381 of the port (0.76 of the fair half: the rates
    saw under the 5 ms polls, 77% of the ports used). Judged: the median of three runs within
    0.05 of the simulator's and above 0.7 of the fair share, and no run's tenant starved (each
    above half the fair share: without the controller's cuts a tenant keeps a few percent of
    its port against line-rate UDP). A single run is not held to 0.7: a clean checkout's
    suite had one at 0.339, where the 12 runs below gave 0.367-0.395. At a 25 Mb/s cap: at
    the default 100 Mb/s two line-rate UDP sources and the userspace switch left no core of 2
    idle for 4-5 s of 6 and the shares fell to 0.30-0.37 with the ports 64-71% used; at 50
    Mb/s the runs took 75-90% of the 2 cores, and 6 of the 7 runs of 34 whose least idle
    second kept under 7% (as the machine's spare capacity came and went) gave a tenant
    0.31-0.35; at 25 Mb/s they leave a third idle, and 12 runs gave 0.367-0.395
    (docs/testbed.md)."""
    flows = ["tcp.0", "tcp.1"]
    expected, shares, saturated = sdn_gcc_shares(tmp_path, TWO_BOTTLENECKS, flows, 1.5, 6.0,
                                                 rate_cap_bps=25e6)
    fair = 0.5
    said = f"testbed {shares}, saturated {saturated}"
    for f in flows:
        median = statistics.median(shares[f])
        assert abs(median - expected[f]) <= 0.05, f"{f}: {said}, simulator {expected[f]:.3f}"
        assert expected[f] >= 0.75 * fair, f"{f}: simulator {expected[f]:.3f} of its port"
        assert median >= 0.7 * fair, f"{f}: the median of {said} of its port"
        assert min(shares[f]) >= 0.5 * fair, f"{f}: a run starved: {said} of its port"


SICC = ("mechanism", '{kind="sicc",interval="10ms",initial_window=2.0,evaluate_on_syn=true,'
                     'incast_duration="30ms"}')


def assert_mice_complete(out: Path) -> None:
    mice = [f for f in read_summary(out)["flows"] if f["name"].startswith("mice")]
    assert len(mice) == 48 and all(f["completed"] for f in mice), [
        f["name"] for f in mice if not f["completed"]]


def median_mouse_fct(out: Path) -> float:
    return statistics.median(f["fct"] for f in read_summary(out)["flows"]
                             if f["name"].startswith("mice"))


def test_sicc_clamps_the_senders_it_knows_the_mice_finish_sooner_and_the_elephants_keep_the_link(
        controller_machine: None, tmp_path: Path) -> None:
    """Paper 002's dumbbell shortened (data/incast-over-elephants.toml): 3 volleys of 16 mice
    (10 KB, new connections, an initial window of 2) into a drop-tail buffer of 83 packets
    that 4 Reno elephants keep full. SICC's controller hears of the SYNs (the switch agent's
    port programs copy them), predicts the incast (16 x 2 + Q >= 83) and has every
    hypervisor clamp its senders' windows to 1 MSS until the queue drains; the mice finish
    sooner and the elephants keep their goodput. Three runs without and three with, in
    turns, on the same file, on Linux switches: SICC's controller needs no OpenFlow.

    The mice's gain, from the model (the link sends a packet in 0.12 ms): without SICC a
    mouse meets at least 72 packets, 8.8 ms a round trip, and needs at least 4 round trips
    (35 ms); with SICC the handshake crosses the full queue (10 ms), then 20 clamped sources
    hold at most 20 packets, 7 round trips of 2.6 ms (28 ms): the median of the paired
    ratios of the median mice below 28 / 35 = 0.8. Measured on Linux switches: 0.53-0.71
    over 7 pairs (with SICC 29-33 ms, without 45-59), before the host agents took the
    mechanism's priority; since, with SICC 24-26 ms. On Open vSwitch's userspace datapath
    the ratio drifted over hours with the code unchanged (0.55-0.91, docs/testbed.md)."""
    base, sicc = [], []
    for i in range(3):
        base.append(run_it(tmp_path / f"none-{i}", INCAST, []))
        sicc.append(run_it(tmp_path / f"sicc-{i}", INCAST, [SICC]))
    for out in base + sicc:
        assert_mice_complete(out)
        assert read_summary(out)["testbed"]["switches"] == "linux"
    ratios = [median_mouse_fct(on) / median_mouse_fct(off) for on, off in zip(sicc, base)]
    assert statistics.median(ratios) < 28 / 35, ratios
    # The elephants keep the 100 Mb/s link: within 10% of the baseline's goodput. Clamping
    # every sender to 1 MSS still fills the link (20 segments in flight, a base round trip
    # holds 2), so only the drain of up to 3 x 30 ms of clamps (2% of 4 s) is lost; the
    # baseline's own goodput varies by 4% from run to run (92.1-95.5 Mb/s in 8 runs on OVS;
    # with SICC 89.8-95.0; on Linux switches 95.1-95.5 both).
    def elephants(out: Path) -> float:
        return sum(f["goodput_mbps"] for f in read_summary(out)["flows"]
                   if f["name"].startswith("elephant"))
    assert statistics.median(map(elephants, sicc)) >= 0.9 * statistics.median(
        map(elephants, base)), ([elephants(d) for d in base], [elephants(d) for d in sicc])
    for out in sicc:
        summary = read_summary(out)
        agents = summary["testbed"]["host_agents"]
        # An ON goes to every source the controller knows behind the port: the elephants'
        # from the start, a mouse's once its SYN was seen. So the elephants got one and no
        # mouse's host more than the elephants'.
        ons = {h: a["incast_on_received"] for h, a in agents.items()}
        elephant_ons = min(ons[f"s{i}"] for i in range(4))
        mouse_ons = max(ons[f"s{i}"] for i in range(4, 20))
        assert 1 <= elephant_ons and mouse_ons <= elephant_ons, ons
        assert sum(a["control_forged"] + a["control_replayed"] for a in agents.values()) == 0
        # The clamps reached the datapaths, the receiver's never: every elephant's ACKs and
        # some mice's were rewritten where a volley was predicted.
        rewrites = {h: a["rwnd_rewrites"] for h, a in agents.items()}
        assert sum(rewrites[f"s{i}"] for i in range(4)) > 0, rewrites
        assert rewrites["r0"] == 0, rewrites
        if mouse_ons > 0:
            assert all(rewrites[f"s{i}"] > 0 for i in range(4)), rewrites
            assert sum(rewrites[f"s{i}"] for i in range(4, 20)) > 0, rewrites
        # The copies came from the port programs: at least each flow's SYN and SYN-ACK and
        # each mouse's FIN (the elephants run to the end).
        events = summary["mechanism"]["controller_events"]
        assert events["port_copies"] >= 2 * 52 + 48, events
        assert "port_copies_ignored" not in events, events
        assert "openflow_unavailable" not in events, events
        assert summary["control"]["rules_installed"] == 0
        assert summary["mechanism"]["control_messages"]["host_message"] > 0


def test_sicc_mice_on_linux_take_what_the_simulators_linux_tcp_says(
        controller_machine: None, tmp_path: Path) -> None:
    """The same volleys with the simulator's Linux TCP (`tcp.profile = "linux"`): the median
    over three testbed runs of each run's median mouse is within 20% of the simulator's
    (seeds 1-3), the tolerance of the simulator against Linux (docs/testbed.md). Measured
    (5 runs): 24.1-26.3 ms against the simulator's 23.5. It holds only if every clamp
    reaches the datapath when the controller sends it: with the host agents at normal
    priority beside the VMs' real-time traffic, the clamps came 5-10 ms late, the elephants
    went on filling the queue meanwhile, and the mice took 29.6-34.5 ms."""
    linux = ("tcp.profile", '"linux"')
    sim = statistics.median(
        median_mouse_fct(tacc.run(INCAST, sets=[SICC, linux], seed=seed,
                                  out=tmp_path / f"sim-{seed}", progress=False).dir)
        for seed in (1, 2, 3))
    runs = [run_it(tmp_path / f"tb-{i}", INCAST, [SICC, linux]) for i in range(3)]
    for out in runs:
        assert_mice_complete(out)
    measured = [median_mouse_fct(out) for out in runs]
    assert abs(statistics.median(measured) / sim - 1) <= 0.20, (measured, sim)


def test_restarts_of_the_controller_and_of_a_switch(ovs_machine: None, tmp_path: Path) -> None:
    """The controller killed at 1 s and started again: the switch keeps forwarding by its
    rules meanwhile (fail mode secure) and the new controller finds it. The switch restarted
    at 2.5 s: its rules come back from the controller and the flows go on (bulk flows to 9 s
    here). Measured: the controller is back 1.05 s after its kill, the switch's routes 0.2 to
    0.3 s after its restart (the daemon's start and the first reconnection), on an idle machine
    and with two busy loops beside the run alike."""
    seen: dict[str, float] = {}
    switch_restart_s, stop_s = 2.5, 9.0

    def restart(names: Names, workdir: Path, t0: int) -> None:
        def at(s: float) -> None:
            time.sleep(max(0.0, (t0 + s * 1e9 - time.monotonic_ns()) / 1e9))

        at(1.0)
        run.restart_controller(workdir)
        seen["controller_back_s"] = (time.monotonic_ns() - t0) / 1e9
        at(switch_restart_s)
        switches = run.running(workdir).switches
        assert switches is not None
        run.restart_switch(workdir, 0)
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            if any("table=2" in r for r in switches.dump_flows(0)):
                seen["routes_back_s"] = (time.monotonic_ns() - t0) / 1e9
                break
            time.sleep(0.05)

    longer = [("duration", '"10s"'), ("flows[0].stop", f'"{stop_s:g}s"')]
    out = run_it(tmp_path, SHORT, [SDN_ECN, *longer], during=restart)
    mech = read_summary(out)["mechanism"]
    assert mech["controller_starts"] == 2
    assert mech["controller_events"]["switch_connects"] >= 3  # first, after each restart
    assert seen["controller_back_s"] < 2.5, seen
    assert seen.get("routes_back_s", 99.0) < 5.0, seen
    with (out / "goodput.csv").open(newline="") as f:
        rows = [(float(r["time_s"]), float(r["goodput_mbps"])) for r in csv.DictReader(f)]
    per_bin: dict[float, float] = {}
    for t, g in rows:
        per_bin[t] = per_bin.get(t, 0.0) + g

    def mean(start: float, end: float) -> float:
        bins = [g for t, g in per_bin.items() if start <= t < end]
        return sum(bins) / max(1, len(bins))

    # While the controller was away and coming back, the link stayed busy.
    assert mean(1.0, switch_restart_s) >= 50.0, f"{mean(1.0, switch_restart_s):.1f} Mb/s"
    # The bulk flows lost everything from the switch's restart until its routes were back, so
    # their retransmission timers backed off: with timeouts doubling from RTO r, the first
    # retry after an outage of length d comes at most d + r after the routes return. Here r
    # is at most 0.65 s: the smoothed RTT plus the larger of 200 ms and four RTT variations,
    # all bounded by the 1000-packet queue's 120 ms. Measured: back 1.5 s after routes
    # returned 1.7 s after the restart.
    routes = seen["routes_back_s"]
    latest = routes + (routes - switch_restart_s) + 0.65
    again = [t for t, g in sorted(per_bin.items()) if t >= routes and g > 10.0]
    assert again and again[0] <= latest, (routes, again[:3])
    # Then they fill the 100 Mb/s link again (slow start from one segment takes a few RTTs).
    assert mean(again[0] + 0.5, stop_s) >= 50.0, f"{mean(again[0] + 0.5, stop_s):.1f} Mb/s"


def test_garbage_on_the_openflow_port_is_logged_and_survived(ovs_machine: None,
                                                              tmp_path: Path) -> None:
    """A peer that speaks no OpenFlow, one with a bad version, and a switch of another
    fabric (unknown datapath id): the controller logs them and goes on."""
    said: dict[str, Any] = {}

    def attack(names: Names, workdir: Path, t0: int) -> None:
        script = (
            "import socket,struct,time\n"
            "def talk(data):\n"
            " s=socket.create_connection(('198.18.0.1',6653),timeout=2)\n"
            " s.sendall(data)\n"
            " try: s.recv(4096)\n"
            " except OSError: pass\n"
            " time.sleep(0.2); s.close()\n"
            "talk(b'GET / HTTP/1.0\\r\\n\\r\\n'*50)\n"
            "talk(struct.pack('!BBHI',0x7f,0,8,1))\n"
            "talk(struct.pack('!BBHI',4,0,8,1)+struct.pack('!BBHI',4,99,8,2))\n"
        )
        said["rc"] = subprocess.run(shell.in_ns(names.mgmt, "python3", "-c", script),
                                    capture_output=True, text=True, timeout=20).returncode
        said["stderr"] = (workdir / "controller.stderr").read_text()

    out = run_it(tmp_path, SHORT, [SDN_ECN], during=attack, duration_s=3.0)
    assert said["rc"] == 0
    summary = read_summary(out)
    assert summary["mechanism"]["controller_starts"] == 1, "the controller never restarted"
    assert summary["mechanism"]["control_messages"]["stats_request"] >= 4, "it kept probing"
    assert float(flow_row(out, "short")["fct"]) > 0


def test_everything_is_torn_down_when_the_controller_dies(ovs_machine: None,
                                                          tmp_path: Path) -> None:
    """A controller that dies unasked fails the run; the namespaces, the OVS daemons and the
    working directory are gone afterwards, as after a run that succeeds."""
    workdirs: list[Path] = []

    def kill(names: Names, workdir: Path, t0: int) -> None:
        workdirs.append(workdir)
        child = run.running(workdir).controller
        assert child is not None
        child.proc.kill()

    with pytest.raises(Failed, match="controller exited"):
        run.run_testbed(SHORT, [SDN_ECN], run.Options(out=tmp_path / "out", quiet=True,
                                                        during=kill, duration_s=2.0))
    run_id = workdirs[0].name.split("-")[-1]
    assert not topology.run_namespaces(f"tacc-{run_id}-")
    assert not workdirs[0].exists()
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(workdirs[0]) not in ps, "an OVS daemon of the run still runs"


def test_openflow_rules_are_the_plans_routes(ovs_machine: None, tmp_path: Path) -> None:
    """The short CI check: a one-second run with a controller; every switch port's route is
    a table-2 rule that rewrites the MACs to the next hop and leaves by the plan's port, and
    the flows get through."""
    seen: list[list[str]] = []

    def dump(names: Names, workdir: Path, t0: int) -> None:
        switches = run.running(workdir).switches
        assert switches is not None
        seen.append(switches.dump_flows(0))

    out = run_it(tmp_path, SHORT, [SDN_ECN], during=dump, duration_s=1.0)
    routes = [r for r in seen[0] if "table=2" in r and "nw_dst=" in r]
    plan_routes = [r for r in plans.load_plan(SHORT)["routes"] if r["switch"] == 0]
    assert len(routes) == len(plan_routes)
    for r in routes:
        assert "dec_ttl" in r and "set_field:02:74:63" in r and "output:" in r, r
    assert float(flow_row(out, "bulk.0")["goodput_mbps"]) > 10.0


def test_a_switch_agent_answers_the_controllers_stats_requests(ovs_machine: None,
                                                               tmp_path: Path) -> None:
    """What OpenFlow cannot give: the port's marks and queue, from the agent's socket, as
    tacc-mech StatsReply JSON; a request for another switch's port gets no answer.

    Two UDP sources at 70 Mb/s each into the 100 Mb/s port fill its 1000-packet drop-tail
    buffer in 0.3 s (40 Mb/s excess) and keep it full from then on. A reading is the limit
    less what the port sent since the last arrival; arrivals come as the sources and OVS's
    polling loop wake, most within 1 ms (10 packets at the port's 120 us each), a few later
    when OVS or the whole machine waits for a core (one reading in 14 runs was 977; a CI run
    read 948 twice, one 6 ms stall read by two requests 50 ms apart, the second sent at once
    after the late first reply). So the readings are 100 ms apart, one stall spoils one of
    them, and the median of nine from 0.6 s is within 10 packets of the limit. TCP's queue
    would depend on Linux's receive-window autotuning and on SDN-ECN's marking, whose first
    interval is pushed past the run."""
    replies: list[Any] = []

    def ask(names: Names, workdir: Path, t0: int) -> None:
        plan = plans.load_plan(SHORT)
        port = next(i for i, p in enumerate(plan["ports"]) if p["name"] == "sw0->r0")
        requests = [{"QueueLength": {"switch": 0, "port": port}}] * 9 + [
            {"PortMarks": {"switch": 0, "port": port}},
            {"PortMarks": {"switch": 1, "port": port}}]
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.bind(str(workdir / "probe.sock"))
            s.settimeout(0.5)
            for i, req in enumerate(requests):
                time.sleep(max(0.0, (t0 + (600 + 100 * i) * 1_000_000 - time.monotonic_ns())
                               / 1e9))
                s.sendto(json.dumps(req).encode(), str(workdir / "agent-sw0.stats.sock"))
                try:
                    replies.append(json.loads(s.recv(4096)))
                except OSError:
                    replies.append(None)

    udp = ("flows", '[{name="udp",count=2,src="s{i}",dst="r0",transport="udp",rate="70Mbps"}]')
    quiet = ("mechanism", '{kind="sdn-ecn",interval="5s",rule_timeout="1s"}')
    out = run_it(tmp_path, SHORT, [udp, quiet], during=ask, duration_s=1.7)
    # The port's own qdisc holds the whole buffer and drops the excess: OVS's send socket
    # once capped a switch's queues at 91 packets and dropped beyond them, uncounted.
    summary = read_summary(out)
    port = next(p for p in summary["ports"] if p["name"] == "sw0->r0")
    # A buffer that did not fill says first whether the sources offered their 140 Mb/s.
    offered = sum(f["bytes_sent"] * 8 / 1e6 / ((f["end"] or summary["sim_seconds"]) - f["start"])
                  for f in summary["flows"])
    seen = f"the sources offered {offered:.0f} Mb/s; {collect.host_during(out, 0.0, 1.7)}"
    assert port["max_backlog_pkts"] >= 990 and port["dropped"] > 1000, f"{port}; {seen}"
    *queues, marks, other = replies
    assert all(q is not None for q in queues), queues
    pkts = [q["QueueLength"]["pkts"] for q in queues]
    assert 990 <= statistics.median(pkts) and max(pkts) <= 1000, f"{pkts}; {seen}"
    assert marks is not None and marks["PortMarks"]["marks"] == 0, marks  # drop-tail
    assert other is None


def test_ecmp_flows_take_the_engines_paths(ovs_machine: None, tmp_path: Path) -> None:
    """Two racks under two aggregation switches: each top-of-rack switch sends a flow's first
    packet to the controller, which picks the uplink by the engine's hash. For this seed the
    engine puts one flow alone on an uplink and the other three on the other: the lone flow
    gets its 1 Gb/s link (0.97 in the simulator) and the three share the other. That holds
    on the testbed only if every flow took the simulator's path (a first-port controller put
    all four on one uplink). The three's split among themselves is Linux's NewReno, not the
    path: their sum is judged, within 0.05 as each share (three runs: lone 0.952-0.964
    against 0.971, the three 0.955-0.964 against 0.965). At x0.02 (uplinks at 20 Mb/s):
    five userspace switches forward 40 Mb/s on two cores, not 400 at x0.1."""
    sim = tacc.run(RACKS_ECMP, out=tmp_path / "sim", progress=False).dir
    out = run_it(tmp_path, RACKS_ECMP, [], switches="ovs", rate_cap_bps=40e6)

    summary = read_summary(out)
    scale = summary["testbed"]["rate_scale"]
    assert summary["mechanism"]["controller_events"]["ecmp_flows"] >= 8  # data and ACKs
    names = [f"cross.{i}" for i in range(4)]
    expected = {n: float(flow_row(sim, n)["goodput_mbps"]) / 1000 for n in names}
    got = {n: float(flow_row(out, n)["goodput_mbps"]) / (1000 * scale) for n in names}
    alone = max(expected, key=expected.__getitem__)
    assert expected[alone] > 0.9 and max(got, key=got.__getitem__) == alone, (got, expected)
    assert got[alone] == pytest.approx(expected[alone], abs=0.05), (got, expected)
    others = [n for n in names if n != alone]
    assert sum(got[n] for n in others) == pytest.approx(sum(expected[n] for n in others),
                                                        abs=0.05), (got, expected)
