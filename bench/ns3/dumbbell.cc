// ns-3 twin of tacc's bench/scenarios/dumbbell-*.toml, for the side-by-side comparison that
// `bench/run.py --with-ns3` runs.
//
//   dumbbell --flows=4 --cc=newreno|dctcp --time=10 --out=result.json
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
// executed (Simulator::GetEventCount) and the wall time of Simulator::Run alone.

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
#include <sstream>
#include <string>
#include <vector>

using namespace ns3;

namespace
{

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

    CommandLine cmd(__FILE__);
    cmd.AddValue("flows", "number of sender/receiver pairs (one bulk TCP flow each)", flows);
    cmd.AddValue("cc", "congestion control: newreno or dctcp", cc);
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

    if (cc == "newreno")
    {
        Config::SetDefault("ns3::TcpL4Protocol::SocketType", TypeIdValue(TcpNewReno::GetTypeId()));
    }
    else if (cc == "dctcp")
    {
        // TcpDctcp switches the socket to DCTCP's ECN mode (ECT on every packet, per-packet ECE).
        Config::SetDefault("ns3::TcpL4Protocol::SocketType", TypeIdValue(TcpDctcp::GetTypeId()));
    }
    else
    {
        std::cerr << "dumbbell: --cc must be newreno or dctcp, not '" << cc << "'\n";
        return 2;
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
    Config::SetDefault("ns3::TcpSocketBase::UseEcn", StringValue("On"));
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

    PointToPointHelper access;
    access.SetDeviceAttribute("DataRate", StringValue("1Gbps"));
    access.SetChannelAttribute("Delay", StringValue("12.5us"));
    access.SetQueue("ns3::DropTailQueue", "MaxSize", StringValue("1p"));
    PointToPointHelper bottleneck;
    bottleneck.SetDeviceAttribute("DataRate", StringValue("1Gbps"));
    bottleneck.SetChannelAttribute("Delay", StringValue("25us"));
    bottleneck.SetQueue("ns3::DropTailQueue", "MaxSize", StringValue("1p"));

    // Queue discs go on before addresses: Ipv4AddressHelper::Assign would otherwise install
    // ns-3's default (FqCoDel) on every device.
    TrafficControlHelper fifo;
    fifo.SetRootQueueDisc("ns3::FifoQueueDisc", "MaxSize", QueueSizeValue(QueueSize("1000p")));
    TrafficControlHelper red;
    red.SetRootQueueDisc("ns3::RedQueueDisc",
                         "MaxSize", QueueSizeValue(QueueSize("100p")),
                         "MinTh", DoubleValue(20),
                         "MaxTh", DoubleValue(20),
                         "QW", DoubleValue(1.0),
                         "Gentle", BooleanValue(false),
                         "UseEcn", BooleanValue(true),
                         "UseHardDrop", BooleanValue(false),
                         "MeanPktSize", UintegerValue(1500),
                         "LinkBandwidth", DataRateValue(DataRate("1Gbps")),
                         "LinkDelay", TimeValue(MicroSeconds(25)));

    Ipv4AddressHelper addr;
    std::vector<Ipv4Address> rcvAddr;
    for (uint32_t i = 0; i < flows; ++i)
    {
        NetDeviceContainer d = access.Install(senders.Get(i), swL);
        fifo.Install(d);
        std::ostringstream base;
        base << "10." << (1 + i / 256) << "." << (i % 256) << ".0";
        addr.SetBase(base.str().c_str(), "255.255.255.0");
        addr.Assign(d);
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
        s.Start(NanoSeconds(static_cast<int64_t>(jitter->GetValue(0, startJitterUs * 1000))));
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
    double util = g_bneckTxBytes * 8.0 / (1e9 * simTime);
    double utilWarm = (g_bneckTxBytes - g_bneckTxBytesWarm) * 8.0 / (1e9 * (simTime - warmup));
    Simulator::Destroy();

    std::ostringstream j;
    j << std::setprecision(10) << "{\n"
      << "  \"simulator\": \"ns-" << NS3_VERSION_MAJOR << "." << NS3_VERSION_MINOR << "\",\n"
      << "  \"flows\": " << flows << ",\n"
      << "  \"cc\": \"" << cc << "\",\n"
      << "  \"sim_seconds\": " << simTime << ",\n"
      << "  \"warmup_seconds\": " << warmup << ",\n"
      << "  \"wall_seconds\": " << wall << ",\n"
      << "  \"events\": " << events << ",\n"
      << "  \"goodput_mbps\": " << JsonList(gp) << ",\n"
      << "  \"goodput_mbps_after_warmup\": " << JsonList(gpWarm) << ",\n"
      << "  \"jain\": " << Jain(gp) << ",\n"
      << "  \"jain_after_warmup\": " << Jain(gpWarm) << ",\n"
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
