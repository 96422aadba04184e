"""Packet captures of simulated ports (`[output] pcap`, `tacc run --pcap`) and of testbed
ports (`tacc testbed --pcap`), read back with dpkt and tshark, readers nobody here wrote:
each packet's headers are the simulated packet's, and the captures agree with the run's own
counters to the packet."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

import dpkt
import pytest

from tacc import cli
from tacc.summary import read_summary

DATA = Path(__file__).parent / "data"
FOUR_FLOWS = DATA / "four-flows.toml"
INCAST = DATA / "incast-over-elephants.toml"
MSS = 1460
LINKTYPE_RAW = 101  # tcpdump.org's link-layer header types: IPv4 first (dpkt's DLT_RAW is 12)


Packet = tuple[float, Any, str | None, bytes]


def read_capture(path: Path, ethernet: bool = False) -> tuple[str, list[Packet]]:
    """The interface's name and (time, IPv4 packet, comment, its bytes kept) per packet;
    `ethernet`: frames, whose IPv4 packets are read (anything else is kept as the frame)."""
    with path.open("rb") as f:
        reader = dpkt.pcapng.Reader(f)
        name = next(o.data for o in reader.idb.opts if o.code == dpkt.pcapng.PCAPNG_OPT_IF_NAME)
    packets: list[Packet] = []
    raw = path.read_bytes()
    i = 0
    while i < len(raw):
        kind, length = struct.unpack_from("<II", raw, i)
        if kind == dpkt.pcapng.PCAPNG_BT_EPB:
            epb = dpkt.pcapng.EnhancedPacketBlockLE(raw[i:i + length])
            comment = next((o.data.decode() for o in epb.opts
                            if o.code == dpkt.pcapng.PCAPNG_OPT_COMMENT), None)
            ts = ((epb.ts_high << 32) | epb.ts_low) / 1e9
            kept = epb.pkt_data
            if ethernet:
                frame = dpkt.ethernet.Ethernet(kept)
                packets.append((ts, frame.data, comment, kept[14:]))
            else:
                packets.append((ts, dpkt.ip.IP(kept), comment, kept))
        i += length
    return name.decode(), packets


def checksums_hold(ip: Any, kept: bytes) -> bool:
    """The IPv4 header's checksum, and the TCP one over the pseudo-header and the bytes
    kept (the payload beyond the snap length is zero, and zeros add nothing to the sum)."""
    header_len = (kept[0] & 0x0F) * 4
    if dpkt.in_cksum(kept[:header_len]) != 0:
        return False
    if ip.p != dpkt.ip.IP_PROTO_TCP:
        return True
    pseudo = struct.pack(">4s4sxBH", ip.src, ip.dst, ip.p, ip.len - header_len)
    return dpkt.in_cksum(pseudo + kept[header_len:]) == 0


def tshark() -> str:
    """Wireshark's reader: installed with the testbed's packages (tools/testbed-deps.sh, as
    root); a skip without it, a failure where the testbed is required."""
    path = shutil.which("tshark")
    if path is None:
        if os.environ.get("TACC_REQUIRE_TESTBED") == "1":
            pytest.fail("tshark is missing (tools/testbed-deps.sh installs it)")
        pytest.skip("tshark is missing (tools/testbed-deps.sh installs it, as root)")
    return path


def tshark_expert(path: Path, level: str) -> str:
    """What Wireshark's expert analysis reports at `level` or above, checksums verified
    (empty when nothing); tshark's own complaints about the file fail the test."""
    done = subprocess.run(
        [tshark(), "-r", str(path), "-o", "ip.check_checksum:TRUE", "-o",
         "tcp.check_checksum:TRUE", "-q", "-z", f"expert,{level}"],
        capture_output=True, text=True, check=True)
    complaints = [line for line in done.stderr.splitlines() if "Running as user" not in line]
    assert not complaints, complaints
    return done.stdout.strip()


def run(tmp_path: Path, scenario: Path, sets: list[str], ports: list[str]) -> Path:
    out = tmp_path / "out"
    args = ["run", str(scenario), "--out", str(out), "--no-plot", "--quiet"]
    for s in sets:
        args += ["--set", s]
    for p in ports:
        args += ["--pcap", p]
    assert cli.main(args) == 0
    return out


def port_summary(out: Path, name: str) -> dict[str, Any]:
    return next(p for p in read_summary(out)["ports"] if p["name"] == name)


def test_a_bottleneck_capture_holds_every_packet_sent_its_marks_and_sequence_numbers(
        engine: None, tmp_path: Path) -> None:
    """Four NewReno flows with ECN through RED at K = 20 into one 1 Gb/s port, 0.3 s: the
    capture holds every packet the port started sending by the end (its bytes are the
    port's), CE on exactly the packets the port marked,
    one after another no faster than the line rate, checksums valid, SYNs with the MSS. Each flow's highest
    sequence number sent is at least what the receiver got, and at most the buffer and the
    path's bandwidth-delay product (100 + 9 packets, at 1 Gb/s over 100 us) beyond it."""
    out = run(tmp_path, FOUR_FLOWS, ["duration=0.3s"], ["sw0->r0"])
    with (out / "pcap" / "sw0-to-r0.pcapng").open("rb") as f:
        assert dpkt.pcapng.Reader(f).datalink() == LINKTYPE_RAW
    name, packets = read_capture(out / "pcap" / "sw0-to-r0.pcapng")
    port = port_summary(out, "sw0->r0")
    assert name == "sw0->r0"
    # What started by the end, to the byte (the engine charges 20 bytes of TCP header).
    assert sum(ip.len - len(ip.data.opts) for _, ip, _, _ in packets) == port["tx_bytes"]
    assert port["enqueued"] - port["max_backlog_pkts"] <= len(packets) <= port["enqueued"]
    assert len(packets) > 20_000 and max(t for t, _, _, _ in packets) <= 0.3
    # Marked as admitted: those still queued at the end are counted, not captured.
    marks = sum(ip.tos & 3 == 3 for _, ip, _, _ in packets)
    assert port["marked"] - port["max_backlog_pkts"] <= marks <= port["marked"]
    assert marks > 1000
    for (t0, ip0, _, _), (t1, _, _, _) in zip(packets, packets[1:]):
        # The engine charges a TCP header as 20 bytes; the capture adds its options.
        assert t1 - t0 >= (ip0.len - len(ip0.data.opts)) * 8 / 1e9 - 1e-9
    assert all(checksums_hold(ip, kept) for _, ip, _, kept in packets)
    isn: dict[bytes, int] = {}
    highest: dict[bytes, int] = {}
    for _, ip, _, _ in packets:
        tcp = ip.data
        if tcp.flags & dpkt.tcp.TH_SYN:
            isn[ip.src] = tcp.seq
            opts = dict(dpkt.tcp.parse_opts(tcp.opts))
            assert struct.unpack(">H", opts[dpkt.tcp.TCP_OPT_MSS])[0] == MSS
        elif ip.len > 40:
            end = (tcp.seq - isn[ip.src] - 1 + ip.len - 40) % 2**32
            highest[ip.src] = max(highest.get(ip.src, 0), end)
    flows = json.loads((out / "summary.json").read_text())["flows"]
    assert len(highest) == 4
    delivered = sorted(f["bytes_delivered"] for f in flows)
    for got, sent in zip(delivered, sorted(highest.values())):
        assert got <= sent <= got + 109 * MSS


def test_dropped_packets_are_captured_with_a_comment_when_asked(engine: None,
                                                                 tmp_path: Path) -> None:
    """Drop-tail at 20 packets without ECN: the capture holds each packet the queue refused,
    with a comment saying so, as many as the port counts, among the ones it sent (their
    bytes the port's), all in time order."""
    sets = ['queue={kind="droptail",limit="20pkt"}', "tcp.ecn=false", "duration=0.3s",
            "output.pcap_dropped=true"]
    out = run(tmp_path, FOUR_FLOWS, sets, ["sw0->r0"])
    _, packets = read_capture(out / "pcap" / "sw0-to-r0.pcapng")
    port = port_summary(out, "sw0->r0")
    comments = [c for _, _, c, _ in packets]
    assert comments.count("dropped: the queue was full") == port["dropped_overflow"] > 10
    sent = [ip for _, ip, c, _ in packets if c is None]
    assert sum(ip.len - len(ip.data.opts) for ip in sent) == port["tx_bytes"]
    assert set(comments) == {None, "dropped: the queue was full"}
    stamps = [t for t, _, _, _ in packets]
    assert stamps == sorted(stamps)


def test_packets_lost_on_the_link_are_captured_as_sent_with_a_comment(
        engine: None, tmp_path: Path) -> None:
    """The link loses a packet after the port sent it: it is in the capture, marked."""
    lossy = ('loss', '[{model="bernoulli",ports=["sw0->r0"],rate=0.01}]')
    out = run(tmp_path, FOUR_FLOWS, ["duration=0.3s", "=".join(lossy)], ["sw0->r0"])
    _, packets = read_capture(out / "pcap" / "sw0-to-r0.pcapng")
    port = port_summary(out, "sw0->r0")
    lost = [c for _, _, c, _ in packets if c == "lost on the link"]
    # The engine draws a loss as it admits a packet: one not started by the end is counted.
    assert port["dropped_loss"] - port["max_backlog_pkts"] <= len(lost) <= port["dropped_loss"]
    assert len(lost) > 50
    assert sum(ip.len - len(ip.data.opts) for _, ip, _, _ in packets) == port["tx_bytes"]


def test_clamped_windows_are_on_the_wire_as_the_switch_wrote_them(engine: None,
                                                                  tmp_path: Path) -> None:
    """SICC in the switch clamps the window of ACKs to one MSS while an incast is on: on
    every port toward the senders, the ACKs whose window (scaled by the SYN-ACK's shift) is
    under one MSS and one scale unit, and the SYN-ACKs at one MSS, number the rewrites the
    switch counts, less at most those still queued at the end."""
    ports = [f"sw0->s{i}" for i in range(20)]
    out = run(tmp_path, INCAST, ['mechanism={kind="sicc",mode="switch"}'], ports)
    clamped = 0
    for p in ports:
        name, packets = read_capture(out / "pcap" / f"{p.replace('->', '-to-')}.pcapng")
        assert name == p
        shift: dict[int, int] = {}
        for _, ip, _, _ in packets:
            tcp = ip.data
            if tcp.flags & dpkt.tcp.TH_SYN:
                shift[tcp.dport] = dict(dpkt.tcp.parse_opts(tcp.opts))[dpkt.tcp.TCP_OPT_WSCALE][0]
                clamped += tcp.win == MSS
            elif tcp.win << shift[tcp.dport] < MSS + (1 << shift[tcp.dport]):
                clamped += 1
    counters = json.loads((out / "summary.json").read_text())["mechanism"]["counters"]
    # An ACK rewritten as it came in and still queued at the end is not on the wire yet.
    queued = sum(port_summary(out, p)["max_backlog_pkts"] for p in ports)
    assert counters["rwnd_rewrites"] - queued <= clamped <= counters["rwnd_rewrites"]
    assert clamped > 1000


def test_a_capture_of_an_unknown_port_is_refused(engine: None, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["run", str(FOUR_FLOWS), "--out", str(tmp_path / "o"), "--pcap",
                     "sw0->nowhere"]) == 2
    err = capsys.readouterr().err
    assert 'output.pcap[0]: no port named "sw0->nowhere" (ports are named like' in err


@pytest.mark.testbed
def test_a_testbed_port_is_captured_in_the_engines_format(testbed_machine: None,
                                                          tmp_path: Path) -> None:
    """`tacc testbed --pcap`: tcpdump's capture of what the port's interface sent, written
    as the engine writes its own (pcapng, the interface named after the port): Linux's
    packets with their real headers, every checksum valid (offloads are off), no more data
    without ECT than the kernel's retransmissions, CE on at least the packets the switch
    agent counts as marked and sent, and each flow's highest sequence number at least what
    its receiver got."""
    out = tmp_path / "out"
    assert cli.main(["testbed", str(FOUR_FLOWS), "--out", str(out), "--quiet", "--duration",
                     "2s", "--pcap", "sw0->r0"]) == 0
    path = out / "pcap" / "sw0-to-r0.pcapng"
    with path.open("rb") as f:
        assert dpkt.pcapng.Reader(f).datalink() == dpkt.pcap.DLT_EN10MB
    name, frames = read_capture(path, ethernet=True)
    assert name == "sw0->r0"
    tcp_packets = [(ip, kept) for _, ip, _, kept in frames
                   if isinstance(ip, dpkt.ip.IP) and ip.p == dpkt.ip.IP_PROTO_TCP]
    assert len(tcp_packets) > 10_000
    assert all(checksums_hold(ip, kept) for ip, kept in tcp_packets)
    # The capture runs from before the flows' start to after their end, the counters
    # between the two: it holds every packet the port sent and every mark that left.
    port = port_summary(out, "sw0->r0")
    assert len(frames) >= port["enqueued"] - port["dropped"]
    marked = sum(ip.tos & 3 == 3 for ip, _ in tcp_packets)
    assert marked >= port["marked"] - port["dropped"] > 100
    highest: dict[bytes, int] = {}
    isn: dict[bytes, int] = {}
    not_ect = 0
    for ip, _ in tcp_packets:
        tcp = ip.data
        if tcp.flags & dpkt.tcp.TH_SYN:
            isn[ip.src] = tcp.seq
        elif ip.src in isn and (size := ip.len - ip.hl * 4 - tcp.off * 4) > 0:
            start = (tcp.seq - isn[ip.src] - 1) % 2**32
            highest[ip.src] = max(highest.get(ip.src, 0), start + size)
            not_ect += ip.tos & 3 == 0
    flows = read_summary(out)["flows"]
    # Only a retransmission goes without ECT (RFC 3168 6.1.5), as the kernel counts them.
    assert not_ect <= sum(f["retransmits"] for f in flows)
    delivered = sorted(f["bytes_delivered"] for f in flows)
    assert len(highest) == 4
    for got, sent in zip(delivered, sorted(highest.values())):
        assert sent >= got
    assert tshark_expert(path, "error") == ""


def test_tshark_reads_the_captures_without_a_warning(engine: None, tmp_path: Path) -> None:
    """Wireshark, checksums verified, finds nothing to warn about in a bottleneck's capture
    (no drops, ECN) and no error in one with its drops; it reads each drop's comment."""
    marks = run(tmp_path / "ecn", FOUR_FLOWS, ["duration=0.3s"], ["sw0->r0"])
    assert tshark_expert(marks / "pcap" / "sw0-to-r0.pcapng", "warn") == ""
    sets = ['queue={kind="droptail",limit="20pkt"}', "tcp.ecn=false", "duration=0.3s",
            "output.pcap_dropped=true"]
    drops = run(tmp_path / "drops", FOUR_FLOWS, sets, ["sw0->r0"])
    path = drops / "pcap" / "sw0-to-r0.pcapng"
    assert tshark_expert(path, "error") == ""
    comments = subprocess.run(
        [tshark(), "-r", str(path), "-Y", "frame.comment", "-T", "fields", "-e",
         "frame.comment"], capture_output=True, text=True, check=True).stdout.split("\n")
    dropped = port_summary(drops, "sw0->r0")["dropped_overflow"]
    assert comments.count("dropped: the queue was full") == dropped > 10


def test_a_run_replaces_only_its_own_capture_files(engine: None, tmp_path: Path) -> None:
    """Capture files of an earlier run go; anything else in pcap/ stays, and a run that
    captures nothing leaves the folder alone."""
    out = tmp_path / "out"
    (out / "pcap").mkdir(parents=True)
    (out / "pcap" / "notes.txt").write_text("mine")
    (out / "pcap" / "old-port.pcapng").write_text("stale")
    run(tmp_path, FOUR_FLOWS, ["duration=0.05s"], ["sw0->r0"])
    assert sorted(p.name for p in (out / "pcap").iterdir()) == ["notes.txt",
                                                                 "sw0-to-r0.pcapng"]
    run(tmp_path, FOUR_FLOWS, ["duration=0.05s"], [])
    assert sorted(p.name for p in (out / "pcap").iterdir()) == ["notes.txt",
                                                                 "sw0-to-r0.pcapng"]


def test_a_tcpdump_file_cut_inside_a_packet_keeps_the_packets_before_it(
        engine: None, tmp_path: Path) -> None:
    """tcpdump stopped in the middle of writing a packet: the whole ones are rewritten and
    the cut is reported; a file without even a header is an error."""
    from tacc import _core

    header = struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 128, 1)
    frame = bytes(60)
    record = struct.pack("<IIII", 1, 500, len(frame), len(frame)) + frame
    src = tmp_path / "cut.pcap"
    src.write_bytes(header + record + record[:30])
    dst = tmp_path / "cut.pcapng"
    assert _core.pcap_to_pcapng(str(src), str(dst), "sw0->r0") == (1, True)
    name, packets = read_capture(dst, ethernet=True)
    assert name == "sw0->r0" and [t for t, _, _, _ in packets] == [1.0000005]
    src.write_bytes(header[:10])
    with pytest.raises(ValueError, match="shorter than a pcap file header"):
        _core.pcap_to_pcapng(str(src), str(dst), "sw0->r0")
    assert _core.capture_files(["sw0->r0", "sw0-to-r0", "a b"]) == [
        "sw0-to-r0.pcapng", "sw0-to-r0-2.pcapng", "a_b.pcapng"]
