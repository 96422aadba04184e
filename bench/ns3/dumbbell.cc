// ns-3 twin of tacc's bench/scenarios/dumbbell-*.toml, for the side-by-side comparison that
// `bench/run.py --with-ns3` runs.
//
//   dumbbell --flows=4 --cc=newreno|dctcp|cubic --time=10 --out=result.json
//
// The matrix of bench/ns3/matrix.py also sets --rate, --delay-us, --bneck-delay-us, --buffer,
// --k, --ecn and a per-flow --cc list (e.g. --cc=newreno,newreno,dctcp,dctcp); the defaults are
// the benchmark scenarios' values below.
//
// Topology: N senders -> swL -> swR -> N receivers, every link 1 Gb/s; access links 12.5 us,
// the bottleneck swL->swR 25 us (base RTT 100 us). The bottleneck's queue disc is RED with
// MinTh = MaxTh = 20 packets, QW = 1 (instantaneous queue), Gentle off, 100-packet limit, ECN
// marking (UseHardDrop off): every ECT packet arriving to >= 20 queued packets is CE-marked, as
// tacc's `red-ecn` with k = 20pkt. Every other port is a 1000-packet FIFO (tacc's NIC default and
// a large switch buffer). Devices keep a 1-packet transmit queue under the queue disc so that RED
// sees (almost) the whole backlog.
//
// TCP as tacc's defaults: MSS 1460 without timestamps (1500-byte IP packets), SACK on,
// initial window 2 segments, MinRto 200 ms, SYN timeout 1 s, an ACK for every segment, 2 MB socket buffers,
// ECN on (NewReno: RFC 3168; DCTCP: ns-3's TcpDctcp, g = 1/16, alpha starts at 1). Bulk senders
// for the whole run, each starting at a random time in [0, 12 us]: ns-3 has nothing like tacc's
// per-packet NIC jitter (uniform in [0, 12 us] on every packet a host sends), so only the first
// packets (the SYNs) get it. Any ns-3 attribute can still be overridden on the command line
// (e.g. --ns3::TcpL4Protocol::RecoveryType=ns3::TcpClassicRecovery).
//
// Output (JSON): per-flow goodput in Mb/s over the whole run and over [warmup, time], Jain's
// index of both, bottleneck marks / drops / utilization, the number of events the simulator
// executed (Simulator::GetEventCount) and the wall time of Simulator::Run alone. With --stats=1
// also, per flow: retransmitted data segments, timeouts (CA_LOSS), fast recoveries
// (CA_RECOVERY), ECN window reductions (CA_CWR) and CE marks at the bottleneck; the mean
// FlightSize and the ssthresh set at a recovery's start; how many retransmissions reached the
// bottleneck as ECT and as not-ECT; and the bottleneck backlog samples. --bin-us adds each flow's
// received bytes per bin.

#include "ns3/applications-module.h"
#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"
#include "ns3/version-defines.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <map>
#include <sstream>
#include <string>
#include <vector>

using namespace ns3;

namespace
{

// Per flow: retransmitted data segments (a data segment whose sequence number is below the
// highest one the socket has sent) and that highest sequence number. SYN retransmissions are not
// counted here (the trace is connected after the handshake has started).
std::vector<uint64_t> g_retx;
std::vector<int64_t> g_highSeq;
std::vector<uint64_t> g_timeouts; // per flow: entries into CA_LOSS (retransmission timeouts)
// Per flow: entries into CA_RECOVERY (fast retransmits), and at each entry the FlightSize
// (highest sequence sent - last cumulative ACK, RFC 5681's definition) beside the ssthresh the
// socket sets right after (from its BytesInFlight), to compare with ssthresh = FlightSize / 2.
std::vector<uint64_t> g_recoveries;
std::vector<uint64_t> g_cwrs;            // per flow: entries into CA_CWR (ECN window reductions)
std::vector<uint64_t> g_flowMarks;       // per flow: CE marks at the bottleneck
std::map<uint32_t, uint32_t> g_flowOfSrc; // sender address -> flow index
std::vector<uint32_t> g_lastAck, g_highTx, g_ssthresh;
double g_recFlightSum = 0, g_recSsthreshSum = 0;
uint64_t g_recSamples = 0;
// Bottleneck backlog samples (packets in the queue disc + the device queue), every sample period.
std::vector<std::pair<double, uint32_t>> g_qSamples;
// Data segments arriving at the bottleneck queue disc that are retransmissions (sequence number
// below the highest one seen from that source), by ECN codepoint and fate: [not-ECT, ECT or CE]
// x [enqueued, dropped]. Shows whether retransmissions are sent as ECT.
std::map<uint32_t, int64_t> g_bnHighSeq; // per source address: highest sequence number seen
uint64_t g_retxArrivals[2][2] = {{0, 0}, {0, 0}};
// Per-flow application bytes received, sampled every --bin-us (0: off).
std::vector<std::vector<uint64_t>> g_rxBins;

void
OnBottleneckArrival(bool dropped, Ptr<const QueueDiscItem> item)
{
    Ptr<const Ipv4QueueDiscItem> ip = DynamicCast<const Ipv4QueueDiscItem>(item);
    if (!ip || ip->GetHeader().GetProtocol() != 6)
    {
        return;
    }
    Ptr<Packet> p = ip->GetPacket()->Copy();
    TcpHeader h;
    p->RemoveHeader(h);
    if (p->GetSize() == 0)
    {
        return;
    }
    uint32_t src = ip->GetHeader().GetSource().Get();
    int64_t seq = h.GetSequenceNumber().GetValue();
    auto it = g_bnHighSeq.find(src);
    if (it != g_bnHighSeq.end() && SequenceNumber32(seq) < SequenceNumber32(it->second))
    {
        bool ect = ip->GetHeader().GetEcn() != Ipv4Header::ECN_NotECT;
        g_retxArrivals[ect ? 1 : 0][dropped ? 1 : 0]++;
    }
    else
    {
        g_bnHighSeq[src] = seq;
    }
}

void
OnBottleneckMark(Ptr<const QueueDiscItem> item, const char*)
{
    Ptr<const Ipv4QueueDiscItem> ip = DynamicCast<const Ipv4QueueDiscItem>(item);
    auto it = ip ? g_flowOfSrc.find(ip->GetHeader().GetSource().Get()) : g_flowOfSrc.end();
    if (it != g_flowOfSrc.end())
    {
        g_flowMarks[it->second]++;
    }
}

void
OnBottleneckEnqueue(Ptr<const QueueDiscItem> item)
{
    OnBottleneckArrival(false, item);
}

void
OnBottleneckDrop(Ptr<const QueueDiscItem> item, const char*)
{
    OnBottleneckArrival(true, item);
}

void
OnSocketTx(uint32_t flow, Ptr<const Packet> p, const TcpHeader& h, Ptr<const TcpSocketBase>)
{
    if (p->GetSize() == 0)
    {
        return;
    }
    int64_t seq = h.GetSequenceNumber().GetValue();
    if (g_highSeq[flow] >= 0 && SequenceNumber32(seq) < SequenceNumber32(g_highSeq[flow]))
    {
        g_retx[flow]++;
    }
    else
    {
        g_highSeq[flow] = seq;
    }
}

void
RecordRecovery(uint32_t flow, uint32_t flight)
{
    g_recFlightSum += flight;
    g_recSsthreshSum += g_ssthresh[flow];
    g_recSamples++;
}

void
OnCongState(uint32_t flow, TcpSocketState::TcpCongState_t, TcpSocketState::TcpCongState_t now)
{
    if (now == TcpSocketState::CA_LOSS)
    {
        g_timeouts[flow]++;
    }
    if (now == TcpSocketState::CA_CWR)
    {
        g_cwrs[flow]++;
    }
    if (now == TcpSocketState::CA_RECOVERY)
    {
        g_recoveries[flow]++;
        // The socket sets ssthresh after announcing the state: read it once this event is done.
        Simulator::ScheduleNow(&RecordRecovery, flow, g_highTx[flow] - g_lastAck[flow]);
    }
}

void
OnSocketRx(uint32_t flow, Ptr<const Packet>, const TcpHeader& h, Ptr<const TcpSocketBase>)
{
    if (h.GetFlags() & TcpHeader::ACK)
    {
        g_lastAck[flow] = h.GetAckNumber().GetValue();
    }
}

void
OnHighTx(uint32_t flow, SequenceNumber32, SequenceNumber32 now)
{
    g_highTx[flow] = now.GetValue();
}

void
OnSsthresh(uint32_t flow, uint32_t, uint32_t now)
{
    g_ssthresh[flow] = now;
}

void
ConnectTx(uint32_t flow, uint32_t nodeId)
{
    std::ostringstream path;
    path << "/NodeList/" << nodeId << "/$ns3::TcpL4Protocol/SocketList/0/";
    Config::ConnectWithoutContext(path.str() + "Tx", MakeBoundCallback(&OnSocketTx, flow));
    Config::ConnectWithoutContext(path.str() + "CongState", MakeBoundCallback(&OnCongState, flow));
    Config::ConnectWithoutContext(path.str() + "Rx", MakeBoundCallback(&OnSocketRx, flow));
    Config::ConnectWithoutContext(path.str() + "HighestSequence", MakeBoundCallback(&OnHighTx, flow));
    Config::ConnectWithoutContext(path.str() + "SlowStartThreshold", MakeBoundCallback(&OnSsthresh, flow));
}

void
SampleQueue(Ptr<QueueDisc> q, Ptr<NetDevice> dev, Time period)
{
    Ptr<PointToPointNetDevice> p2p = DynamicCast<PointToPointNetDevice>(dev);
    g_qSamples.emplace_back(Simulator::Now().GetSeconds(),
                            q->GetNPackets() + p2p->GetQueue()->GetNPackets());
    Simulator::Schedule(period, &SampleQueue, q, dev, period);
}

uint64_t g_bneckTxBytes = 0;       // IP bytes the bottleneck device started transmitting
uint64_t g_bneckTxBytesWarm = 0;   // ... at the end of the warm-up
std::vector<uint64_t> g_rxWarm;    // per-flow application bytes at the end of the warm-up

void
OnBottleneckTx(Ptr<const Packet> p)
{
    g_bneckTxBytes += p->GetSize() - 2; // minus the 2-byte PPP header: count IP bytes, as tacc
}

double
Jain(const std::vector<double>& x)
{
    double s = 0, s2 = 0;
    for (double v : x)
    {
        s += v;
        s2 += v * v;
    }
    return s2 > 0 ? s * s / (x.size() * s2) : 0.0;
}

std::string
JsonList(const std::vector<double>& x)
{
    std::ostringstream o;
    o << std::setprecision(10) << "[";
    for (size_t i = 0; i < x.size(); ++i)
    {
        o << (i ? ", " : "") << x[i];
    }
    o << "]";
    return o.str();
}

} // namespace

int
main(int argc, char* argv[])
{
    uint32_t flows = 4;
    std::string cc = "newreno";
    double simTime = 10.0;
    double warmup = 1.0;
    std::string out = "";
    uint32_t seed = 1;
    double startJitterUs = 12.0;
    std::string rate = "1Gbps";
    double delayUs = 12.5;
    double bneckDelayUs = 25.0;
    uint32_t buffer = 100;
    uint32_t k = 20;
    bool ecn = true;
    double sampleUs = 1000.0;
    bool stats = false;
    double binUs = 0;

    CommandLine cmd(__FILE__);
    cmd.AddValue("flows", "number of sender/receiver pairs (one bulk TCP flow each)", flows);
    cmd.AddValue("cc",
                 "congestion control: newreno, dctcp or cubic, for all flows, or a comma-separated "
                 "list with one entry per flow",
                 cc);
    cmd.AddValue("rate", "rate of every link (ns-3 DataRate, e.g. 1Gbps)", rate);
    cmd.AddValue("delay-us", "propagation delay of the access links, microseconds", delayUs);
    cmd.AddValue("bneck-delay-us", "propagation delay of the bottleneck link, microseconds", bneckDelayUs);
    cmd.AddValue("buffer", "bottleneck queue limit, packets", buffer);
    cmd.AddValue("k", "RED-ECN marking threshold K, packets (with --ecn=1)", k);
    cmd.AddValue("ecn",
                 "1: RED-ECN bottleneck (mark ECT at >= k, drop non-ECT at >= k), ECN on; "
                 "0: drop-tail bottleneck, ECN off (DCTCP still sets ECT)",
                 ecn);
    cmd.AddValue("sample-us", "bottleneck backlog sample period, microseconds", sampleUs);
    cmd.AddValue("stats",
                 "1: also trace per-flow retransmissions and timeouts and sample the bottleneck "
                 "backlog (off by default so that the speed benchmark runs without the traces)",
                 stats);
    cmd.AddValue("bin-us",
                 "if > 0: also report each flow's received application bytes per bin of this many "
                 "microseconds (rx_bins), e.g. one RTT to follow the window",
                 binUs);
    cmd.AddValue("time", "simulated seconds", simTime);
    cmd.AddValue("warmup", "goodput is also reported over [warmup, time]", warmup);
    cmd.AddValue("out", "write the JSON result here (default: stdout)", out);
    cmd.AddValue("seed", "ns-3 RNG run number", seed);
    cmd.AddValue("start-jitter",
                 "each flow starts at a uniform random time in [0, this] microseconds (tacc's "
                 "default NIC jitter span, one 1500-byte packet time); 0 = all start together",
                 startJitterUs);
    cmd.Parse(argc, argv);
    RngSeedManager::SetRun(seed);

    // One congestion control per flow, set on each sender node's TcpL4Protocol below.
    std::vector<std::string> ccs;
    {
        std::stringstream ss(cc);
        std::string item;
        while (std::getline(ss, item, ','))
        {
            ccs.push_back(item);
        }
    }
    if (ccs.size() == 1)
    {
        ccs.assign(flows, ccs[0]);
    }
    if (ccs.size() != flows)
    {
        std::cerr << "dumbbell: --cc lists " << ccs.size() << " controls for " << flows << " flows\n";
        return 2;
    }
    std::vector<TypeId> ccTypes;
    for (const auto& c : ccs)
    {
        if (c == "newreno")
        {
            ccTypes.push_back(TcpNewReno::GetTypeId());
        }
        else if (c == "dctcp")
        {
            // TcpDctcp switches the socket to DCTCP's ECN mode (ECT on every packet, per-packet ECE).
            ccTypes.push_back(TcpDctcp::GetTypeId());
        }
        else if (c == "cubic")
        {
            ccTypes.push_back(TcpCubic::GetTypeId());
        }
        else
        {
            std::cerr << "dumbbell: --cc entries must be newreno, dctcp or cubic, not '" << c << "'\n";
            return 2;
        }
    }

    // TCP as tacc's defaults (crates/tacc-sim/src/tcp.rs, TcpConfig::default).
    Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(1460));
    Config::SetDefault("ns3::TcpSocket::InitialCwnd", UintegerValue(2));
    Config::SetDefault("ns3::TcpSocket::DelAckCount", UintegerValue(1));
    Config::SetDefault("ns3::TcpSocket::SndBufSize", UintegerValue(2000000));
    Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(2000000));
    Config::SetDefault("ns3::TcpSocketBase::Timestamp", BooleanValue(false));
    Config::SetDefault("ns3::TcpSocketBase::Sack", BooleanValue(true));
    Config::SetDefault("ns3::TcpSocketBase::MinRto", TimeValue(MilliSeconds(200)));
    Config::SetDefault("ns3::TcpSocketBase::UseEcn", StringValue(ecn ? "On" : "Off"));
    // SYN retransmission: tacc uses its initial RTO (1 s, doubling) and never gives up; ns-3's
    // defaults are 3 s and 6 tries.
    Config::SetDefault("ns3::TcpSocket::ConnTimeout", TimeValue(Seconds(1)));
    Config::SetDefault("ns3::TcpSocket::ConnCount", UintegerValue(1000));
    // Re-parse so that --ns3::... overrides given on the command line win over the above.
    cmd.Parse(argc, argv);

    NodeContainer senders, receivers, switches;
    senders.Create(flows);
    receivers.Create(flows);
    switches.Create(2);
    Ptr<Node> swL = switches.Get(0);
    Ptr<Node> swR = switches.Get(1);

    InternetStackHelper stack;
    stack.InstallAll();
    for (uint32_t i = 0; i < flows; ++i)
    {
        senders.Get(i)->GetObject<TcpL4Protocol>()->SetAttribute("SocketType", TypeIdValue(ccTypes[i]));
    }

    PointToPointHelper access;
    access.SetDeviceAttribute("DataRate", StringValue(rate));
    access.SetChannelAttribute("Delay", TimeValue(NanoSeconds(static_cast<int64_t>(delayUs * 1000))));
    access.SetQueue("ns3::DropTailQueue", "MaxSize", StringValue("1p"));
    PointToPointHelper bottleneck;
    bottleneck.SetDeviceAttribute("DataRate", StringValue(rate));
    bottleneck.SetChannelAttribute("Delay", TimeValue(NanoSeconds(static_cast<int64_t>(bneckDelayUs * 1000))));
    bottleneck.SetQueue("ns3::DropTailQueue", "MaxSize", StringValue("1p"));

    // Queue discs go on before addresses: Ipv4AddressHelper::Assign would otherwise install
    // ns-3's default (FqCoDel) on every device.
    TrafficControlHelper fifo;
    fifo.SetRootQueueDisc("ns3::FifoQueueDisc", "MaxSize", QueueSizeValue(QueueSize("1000p")));
    TrafficControlHelper red;
    std::string bufStr = std::to_string(buffer) + "p";
    if (ecn)
    {
        red.SetRootQueueDisc("ns3::RedQueueDisc",
                             "MaxSize", QueueSizeValue(QueueSize(bufStr)),
                             "MinTh", DoubleValue(k),
                             "MaxTh", DoubleValue(k),
                             "QW", DoubleValue(1.0),
                             "Gentle", BooleanValue(false),
                             "UseEcn", BooleanValue(true),
                             "UseHardDrop", BooleanValue(false),
                             "MeanPktSize", UintegerValue(1500),
                             "LinkBandwidth", DataRateValue(DataRate(rate)),
                             "LinkDelay", TimeValue(NanoSeconds(static_cast<int64_t>(bneckDelayUs * 1000))));
    }
    else
    {
        red.SetRootQueueDisc("ns3::FifoQueueDisc", "MaxSize", QueueSizeValue(QueueSize(bufStr)));
    }

    Ipv4AddressHelper addr;
    std::vector<Ipv4Address> rcvAddr;
    for (uint32_t i = 0; i < flows; ++i)
    {
        NetDeviceContainer d = access.Install(senders.Get(i), swL);
        fifo.Install(d);
        std::ostringstream base;
        base << "10." << (1 + i / 256) << "." << (i % 256) << ".0";
        addr.SetBase(base.str().c_str(), "255.255.255.0");
        Ipv4InterfaceContainer ifs = addr.Assign(d);
        g_flowOfSrc[ifs.GetAddress(0).Get()] = i;
    }
    for (uint32_t i = 0; i < flows; ++i)
    {
        NetDeviceContainer d = access.Install(receivers.Get(i), swR);
        fifo.Install(d);
        std::ostringstream base;
        base << "10." << (101 + i / 256) << "." << (i % 256) << ".0";
        addr.SetBase(base.str().c_str(), "255.255.255.0");
        Ipv4InterfaceContainer ifs = addr.Assign(d);
        rcvAddr.push_back(ifs.GetAddress(0));
    }
    NetDeviceContainer bn = bottleneck.Install(swL, swR);
    QueueDiscContainer redQ = red.Install(bn.Get(0));
    fifo.Install(bn.Get(1));
    addr.SetBase("10.255.0.0", "255.255.255.0");
    addr.Assign(bn);
    Ipv4GlobalRoutingHelper::PopulateRoutingTables();

    bn.Get(0)->TraceConnectWithoutContext("PhyTxBegin", MakeCallback(&OnBottleneckTx));

    if (stats)
    {
        Simulator::Schedule(MicroSeconds(1), &SampleQueue, redQ.Get(0), bn.Get(0), MicroSeconds(sampleUs));
        redQ.Get(0)->TraceConnectWithoutContext("Enqueue", MakeCallback(&OnBottleneckEnqueue));
        redQ.Get(0)->TraceConnectWithoutContext("DropBeforeEnqueue", MakeCallback(&OnBottleneckDrop));
        redQ.Get(0)->TraceConnectWithoutContext("Mark", MakeCallback(&OnBottleneckMark));
    }
    g_retx.assign(flows, 0);
    g_highSeq.assign(flows, -1);
    g_timeouts.assign(flows, 0);
    g_recoveries.assign(flows, 0);
    g_cwrs.assign(flows, 0);
    g_flowMarks.assign(flows, 0);
    g_lastAck.assign(flows, 0);
    g_highTx.assign(flows, 0);
    g_ssthresh.assign(flows, 0);

    const uint16_t port = 5000;
    Ptr<UniformRandomVariable> jitter = CreateObject<UniformRandomVariable>();
    std::vector<Ptr<PacketSink>> sinks;
    for (uint32_t i = 0; i < flows; ++i)
    {
        PacketSinkHelper sink("ns3::TcpSocketFactory", InetSocketAddress(Ipv4Address::GetAny(), port));
        ApplicationContainer a = sink.Install(receivers.Get(i));
        a.Start(Seconds(0));
        sinks.push_back(DynamicCast<PacketSink>(a.Get(0)));

        BulkSendHelper bulk("ns3::TcpSocketFactory", InetSocketAddress(rcvAddr[i], port));
        bulk.SetAttribute("MaxBytes", UintegerValue(0));
        bulk.SetAttribute("SendSize", UintegerValue(1460 * 10));
        ApplicationContainer s = bulk.Install(senders.Get(i));
        Time start = NanoSeconds(static_cast<int64_t>(jitter->GetValue(0, startJitterUs * 1000)));
        s.Start(start);
        // The socket exists once the application has started: trace its segments from then on.
        if (stats)
        {
            Simulator::Schedule(start + NanoSeconds(1), &ConnectTx, i, senders.Get(i)->GetId());
        }
        s.Stop(Seconds(simTime));
    }

    g_rxWarm.assign(flows, 0);
    Simulator::Schedule(Seconds(warmup), [&sinks]() {
        for (size_t i = 0; i < sinks.size(); ++i)
        {
            g_rxWarm[i] = sinks[i]->GetTotalRx();
        }
        g_bneckTxBytesWarm = g_bneckTxBytes;
    });

    g_rxBins.assign(flows, {});
    std::function<void()> sampleRx;
    sampleRx = [&sinks, &sampleRx, binUs]() {
        for (size_t i = 0; i < sinks.size(); ++i)
        {
            g_rxBins[i].push_back(sinks[i]->GetTotalRx());
        }
        Simulator::Schedule(MicroSeconds(binUs), sampleRx);
    };
    if (binUs > 0)
    {
        Simulator::Schedule(MicroSeconds(binUs), sampleRx);
    }

    Simulator::Stop(Seconds(simTime));
    auto t0 = std::chrono::steady_clock::now();
    Simulator::Run();
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    uint64_t events = Simulator::GetEventCount();

    std::vector<double> gp, gpWarm;
    for (uint32_t i = 0; i < flows; ++i)
    {
        uint64_t rx = sinks[i]->GetTotalRx();
        gp.push_back(rx * 8.0 / simTime / 1e6);
        gpWarm.push_back((rx - g_rxWarm[i]) * 8.0 / (simTime - warmup) / 1e6);
    }
    QueueDisc::Stats st = redQ.Get(0)->GetStats();
    double rateBps = DataRate(rate).GetBitRate();
    double util = g_bneckTxBytes * 8.0 / (rateBps * simTime);
    double utilWarm = (g_bneckTxBytes - g_bneckTxBytesWarm) * 8.0 / (rateBps * (simTime - warmup));
    std::vector<double> retx(g_retx.begin(), g_retx.end());
    std::vector<double> timeouts(g_timeouts.begin(), g_timeouts.end());
    std::vector<double> recoveries(g_recoveries.begin(), g_recoveries.end());
    std::vector<double> cwrs(g_cwrs.begin(), g_cwrs.end());
    std::vector<double> flowMarks(g_flowMarks.begin(), g_flowMarks.end());
    std::ostringstream qs;
    qs << "[";
    for (size_t i = 0; i < g_qSamples.size(); ++i)
    {
        qs << (i ? ", " : "") << "[" << g_qSamples[i].first << ", " << g_qSamples[i].second << "]";
    }
    qs << "]";
    std::ostringstream bins;
    bins << "[";
    for (size_t i = 0; i < g_rxBins.size(); ++i)
    {
        std::vector<double> d;
        uint64_t prev = 0;
        for (uint64_t v : g_rxBins[i])
        {
            d.push_back(static_cast<double>(v - prev));
            prev = v;
        }
        bins << (i ? ", " : "") << JsonList(d);
    }
    bins << "]";
    Simulator::Destroy();

    std::ostringstream j;
    j << std::setprecision(10) << "{\n"
      << "  \"simulator\": \"ns-" << NS3_VERSION_MAJOR << "." << NS3_VERSION_MINOR << "\",\n"
      << "  \"flows\": " << flows << ",\n"
      << "  \"cc\": \"" << cc << "\",\n"
      << "  \"rate\": \"" << rate << "\",\n"
      << "  \"buffer\": " << buffer << ",\n"
      << "  \"k\": " << k << ",\n"
      << "  \"ecn\": " << (ecn ? "true" : "false") << ",\n"
      << "  \"sim_seconds\": " << simTime << ",\n"
      << "  \"warmup_seconds\": " << warmup << ",\n"
      << "  \"wall_seconds\": " << wall << ",\n"
      << "  \"events\": " << events << ",\n"
      << "  \"goodput_mbps\": " << JsonList(gp) << ",\n"
      << "  \"goodput_mbps_after_warmup\": " << JsonList(gpWarm) << ",\n"
      << "  \"jain\": " << Jain(gp) << ",\n"
      << "  \"jain_after_warmup\": " << Jain(gpWarm) << ",\n"
      << "  \"retransmits\": " << JsonList(retx) << ",\n"
      << "  \"timeouts\": " << JsonList(timeouts) << ",\n"
      << "  \"recoveries\": " << JsonList(recoveries) << ",\n"
      << "  \"ecn_reductions\": " << JsonList(cwrs) << ",\n"
      << "  \"marks_per_flow\": " << JsonList(flowMarks) << ",\n"
      << "  \"at_recovery\": {\"samples\": " << g_recSamples << ", \"mean_flight_segments\": "
      << (g_recSamples ? g_recFlightSum / g_recSamples / 1460 : 0) << ", \"mean_ssthresh_segments\": "
      << (g_recSamples ? g_recSsthreshSum / g_recSamples / 1460 : 0) << "},\n"
      << "  \"queue_samples\": " << qs.str() << ",\n"
      << "  \"rx_bins\": " << bins.str() << ",\n"
      << "  \"retx_at_bottleneck\": {\"not_ect_enqueued\": " << g_retxArrivals[0][0]
      << ", \"not_ect_dropped\": " << g_retxArrivals[0][1] << ", \"ect_enqueued\": " << g_retxArrivals[1][0]
      << ", \"ect_dropped\": " << g_retxArrivals[1][1] << "},\n"
      << "  \"bottleneck\": {\"marked\": " << st.nTotalMarkedPackets
      << ", \"dropped\": " << st.nTotalDroppedPackets
      << ", \"enqueued\": " << st.nTotalEnqueuedPackets
      << ", \"tx_bytes\": " << g_bneckTxBytes
      << ", \"utilization\": " << util
      << ", \"utilization_after_warmup\": " << utilWarm << "}\n"
      << "}\n";
    if (out.empty())
    {
        std::cout << j.str();
    }
    else
    {
        std::ofstream(out) << j.str();
    }
    return 0;
}
