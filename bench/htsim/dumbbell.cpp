// The benchmark dumbbells (bench/scenarios/dumbbell-*.toml) in htsim, built against htsim's
// library (bench/htsim/build.sh) the way htsim's own example mains are.
//
//   dumbbell [--flows=4] [--cc=newreno|dctcp] [--time=10] [--seed=1] [--nic-jitter-us=12]
//            [--ecn-response=1] [--out=FILE]
//
// N senders s_i -> swL -> swR -> N receivers r_i, every link 1 Gb/s, access links 12.5 us,
// the bottleneck swL->swR 25 us. Every switch port is an htsim ECNQueue of 100 packets marking
// at K = 20 packets; host NICs are 1000-packet drop-tail Queues. One long-lived TCP flow s_i ->
// r_i per pair from t = 0. 1500-byte packets (a 1460-byte MSS plus 40 bytes of headers), 40-byte
// ACKs, an ACK per segment. bench/htsim/README.md lists what differs from tacc's model.
//
// Prints one JSON object (per-flow goodput, Jain's index, bottleneck marks/drops/utilization,
// events executed, wall time of the event loop) on stdout, or writes it to --out.

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "config.h"
#include "dctcp.h"
#include "ecn.h"
#include "ecnqueue.h"
#include "eventlist.h"
#include "network.h"
#include "pipe.h"
#include "queue.h"
#include "tcp.h"

namespace {

const int PKT = 1500;          // IP packet on the wire
const int HDR = 40;            // IP + TCP headers, so the payload (tacc's MSS) is 1460
const double LINK_GBPS = 1.0;
const double ACCESS_US = 12.5;
const double BOTTLENECK_US = 25.0;
const int SWITCH_LIMIT_PKTS = 100;
const int K_PKTS = 20;
const int NIC_LIMIT_PKTS = 1000;

// NewReno with RFC 3168's response to an ECN echo, which htsim's TcpSrc lacks (it ignores
// ECN_ECHO): once per window of data, ssthresh = max(flight / 2, 2 MSS) and cwnd = ssthresh,
// as tacc's NewReno does. The rest (slow start, fast retransmit/recovery, RTO) is htsim's.
class EcnTcpSrc : public TcpSrc {
public:
    EcnTcpSrc(EventList& ev) : TcpSrc(nullptr, nullptr, ev) {}
    void receivePacket(Packet& pkt) override {
        TcpAck* ack = (TcpAck*)&pkt;
        if ((ack->flags() & ECN_ECHO) && _established && !_in_fast_recovery && ack->ackno() > _ecn_recover) {
            uint64_t flight = _highest_sent - _last_acked;
            _ssthresh = (uint32_t)std::max<uint64_t>(flight / 2, 2 * (uint64_t)_mss);
            _cwnd = _ssthresh;
            _ecn_recover = _highest_sent;
        }
        TcpSrc::receivePacket(pkt);
    }
private:
    uint64_t _ecn_recover = 0;
};

// Counts the ACKs that echo a mark: the sink echoes each CE-marked packet on its own ACK, so this
// is the number of marked packets that reached the receivers.
template <class Src>
class Counted : public Src {
public:
    using Src::Src;
    uint64_t echoes = 0;
    void receivePacket(Packet& pkt) override {
        if (pkt.flags() & ECN_ECHO) echoes++;
        Src::receivePacket(pkt);
    }
};

// A link that adds uniform [0, jitter] to each packet's delay, in FIFO order (tacc's host NIC
// timing noise: every packet a host sends arrives up to one packet time late). Written like
// htsim's Pipe: one pending event at a time, for the head packet.
class JitterPipe : public EventSource, public PacketSink {
public:
    JitterPipe(simtime_picosec delay, simtime_picosec jitter, EventList& ev)
        : EventSource(ev, "jitterpipe"), _delay(delay), _jitter(jitter), _nodename("jitterpipe") {}
    void receivePacket(Packet& pkt) override {
        simtime_picosec at = eventlist().now() + _delay + (simtime_picosec)(drand() * _jitter);
        if (at < _last) at = _last;
        _last = at;
        if (_head == _q.size()) {
            _q.clear();
            _head = 0;
        }
        bool idle = _head == _q.size();
        _q.push_back({at, &pkt});
        if (idle) eventlist().sourceIsPending(*this, at);
    }
    void doNextEvent() override {
        Packet* p = _q[_head++].pkt;
        if (_head < _q.size()) eventlist().sourceIsPending(*this, _q[_head].time);
        p->sendOn();
    }
    const string& nodename() override { return _nodename; }
private:
    simtime_picosec _delay, _jitter, _last = 0;
    std::vector<pktrecord_t> _q;
    size_t _head = 0;
    string _nodename;
};

// Records each sink's cumulative ACK at one instant (goodput from 1 s on, as the ns-3 program).
class Snapshot : public EventSource {
public:
    Snapshot(EventList& ev, std::vector<TcpSink*>& sinks) : EventSource(ev, "snapshot"), _sinks(sinks) {}
    void doNextEvent() override {
        for (TcpSink* s : _sinks) acked.push_back(s->_cumulative_ack);
    }
    std::vector<uint64_t> acked;
private:
    std::vector<TcpSink*>& _sinks;
};

double jain(const std::vector<double>& x) {
    double s = 0, s2 = 0;
    for (double v : x) { s += v; s2 += v * v; }
    return s2 > 0 ? s * s / (x.size() * s2) : 0.0;
}

std::string arg(const char* a, const char* name) {
    size_t n = strlen(name);
    if (strncmp(a, name, n) == 0 && a[n] == '=') return std::string(a + n + 1);
    return std::string();
}

}  // namespace

int main(int argc, char** argv) {
    int flows = 4;
    std::string cc = "newreno", out;
    double seconds = 10.0, jitter_us = 12.0;
    unsigned seed = 1;
    bool ecn_response = true;
    for (int i = 1; i < argc; i++) {
        std::string v;
        if (!(v = arg(argv[i], "--flows")).empty()) flows = std::stoi(v);
        else if (!(v = arg(argv[i], "--cc")).empty()) cc = v;
        else if (!(v = arg(argv[i], "--time")).empty()) seconds = std::stod(v);
        else if (!(v = arg(argv[i], "--seed")).empty()) seed = (unsigned)std::stoul(v);
        else if (!(v = arg(argv[i], "--nic-jitter-us")).empty()) jitter_us = std::stod(v);
        else if (!(v = arg(argv[i], "--ecn-response")).empty()) ecn_response = v != "0";
        else if (!(v = arg(argv[i], "--out")).empty()) out = v;
        else { std::cerr << "unknown argument " << argv[i] << "\n"; return 2; }
    }
    if (cc != "newreno" && cc != "dctcp") { std::cerr << "--cc: newreno or dctcp\n"; return 2; }
    srand(seed);

    Packet::set_packet_size(PKT);
    EventList eventlist;
    eventlist.setEndtime(timeFromSec(seconds));
    const linkspeed_bps rate = speedFromGbps(LINK_GBPS);
    const simtime_picosec access = timeFromUs(ACCESS_US), jitter = timeFromUs(jitter_us);
    const mem_b sw_limit = memFromPkt(SWITCH_LIMIT_PKTS), nic_limit = memFromPkt(NIC_LIMIT_PKTS);
    const mem_b K = memFromPkt(K_PKTS);

    // swL->swR and swR->swL, shared by every flow.
    ECNQueue bottleneck(rate, sw_limit, eventlist, nullptr, K);
    Pipe bottleneck_pipe(timeFromUs(BOTTLENECK_US), eventlist);
    ECNQueue reverse(rate, sw_limit, eventlist, nullptr, K);
    Pipe reverse_pipe(timeFromUs(BOTTLENECK_US), eventlist);

    // RTO timers: htsim checks them from a periodic scan, as its examples do (every 10 ms).
    TcpRtxTimerScanner scanner(timeFromMs(10), eventlist);
    std::vector<TcpSrc*> srcs;
    std::vector<uint64_t*> echoes;
    std::vector<TcpSink*> sinks;
    auto host_link = [&](void) -> PacketSink* {
        if (jitter_us > 0) return new JitterPipe(access, jitter, eventlist);
        return new Pipe(access, eventlist);
    };
    for (int i = 0; i < flows; i++) {
        TcpSrc* src;
        if (cc == "dctcp") {
            auto s = new Counted<DCTCPSrc>(nullptr, nullptr, eventlist);
            echoes.push_back(&s->echoes);
            src = s;
        } else if (ecn_response) {
            auto s = new Counted<EcnTcpSrc>(eventlist);
            echoes.push_back(&s->echoes);
            src = s;
        } else {
            auto s = new Counted<TcpSrc>(nullptr, nullptr, eventlist);
            echoes.push_back(&s->echoes);
            src = s;
        }
        src->set_cwnd(2 * PKT);              // tacc: initial window 2 segments
        src->set_ssthresh(0x7fffffff);       // tacc: no initial ssthresh
        src->_rto = timeFromSec(1.0);        // tacc: initial RTO 1 s (htsim's floor is 250 ms)
        TcpSink* sink = new TcpSink();
        scanner.registerTcp(*src);

        // data: s_i NIC, s_i->swL link, swL->swR, swR->r_i port, swR->r_i link, r_i
        Route* out = new Route();
        out->push_back(new Queue(rate, nic_limit, eventlist, nullptr));
        out->push_back(host_link());
        out->push_back(&bottleneck);
        out->push_back(&bottleneck_pipe);
        out->push_back(new ECNQueue(rate, sw_limit, eventlist, nullptr, K));
        out->push_back(new Pipe(access, eventlist));
        out->push_back(sink);
        // ACKs: r_i NIC, r_i->swR link, swR->swL, swL->s_i port, swL->s_i link, s_i
        Route* back = new Route();
        back->push_back(new Queue(rate, nic_limit, eventlist, nullptr));
        back->push_back(host_link());
        back->push_back(&reverse);
        back->push_back(&reverse_pipe);
        back->push_back(new ECNQueue(rate, sw_limit, eventlist, nullptr, K));
        back->push_back(new Pipe(access, eventlist));
        back->push_back(src);

        src->connect(*out, *back, *sink, 0);
        srcs.push_back(src);
        sinks.push_back(sink);
    }
    Snapshot at1s(eventlist, sinks);
    const double steady_from = seconds > 1.0 ? 1.0 : 0.0;
    eventlist.sourceIsPending(at1s, timeFromSec(steady_from));

    uint64_t events = 0;
    auto t0 = std::chrono::steady_clock::now();
    while (eventlist.doNextEvent()) events++;
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    // Goodput as tacc defines it: payload bytes delivered in order to the application x 8 / run.
    // The sink's cumulative ACK counts the 1-byte SYN and 1500 bytes per data packet.
    auto payload = [](uint64_t acked) { return acked > 1 ? (double)(acked - 1) / PKT * (PKT - HDR) : 0.0; };
    std::vector<double> gp, gp_steady;
    uint64_t marks = 0, received = 0;
    for (int i = 0; i < flows; i++) {
        gp.push_back(payload(sinks[i]->_cumulative_ack) * 8 / seconds / 1e6);
        gp_steady.push_back((payload(sinks[i]->_cumulative_ack) - payload(at1s.acked[i])) * 8 / (seconds - steady_from) / 1e6);
        marks += *echoes[i];
        received += sinks[i]->_packets;
    }
    double total = 0;
    for (double g : gp) total += g;

    std::ostringstream js;
    js.precision(10);
    js << "{\"simulator\": \"htsim\", \"flows\": " << flows << ", \"cc\": \"" << cc << "\", \"sim_seconds\": " << seconds
       << ", \"nic_jitter_us\": " << jitter_us << ", \"ecn_response\": " << (ecn_response ? "true" : "false")
       << ", \"seed\": " << seed << ", \"events\": " << events << ", \"wall_seconds\": " << wall
       << ", \"goodput_mbps\": [";
    for (int i = 0; i < flows; i++) js << (i ? ", " : "") << gp[i];
    js << "], \"goodput_steady_mbps\": [";
    for (int i = 0; i < flows; i++) js << (i ? ", " : "") << gp_steady[i];
    js << "], \"total_goodput_mbps\": " << total << ", \"jain\": " << jain(gp) << ", \"jain_steady\": " << jain(gp_steady)
       << ", \"bottleneck\": {\"marked\": " << marks << ", \"dropped\": " << bottleneck.num_drops()
       << ", \"utilization\": " << (double)received * 8 / (rate * seconds) << "}}\n";
    if (out.empty()) {
        std::cout << js.str();
    } else {
        std::ofstream f(out);
        f << js.str();
    }
    return 0;
}
