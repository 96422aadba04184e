//! Every key of a scenario file, declared once with its doc, unit, default and range: what
//! `tacc keys` prints and docs/scenario-keys.md lists. The tables' serde structs in
//! [`crate::scenario`] are what the parser reads; a test checks that each table here has
//! exactly the keys its struct takes, and that every default written here is the one the
//! parser applies where the parser applies it.

use tacc_mech::vocab::keys::{KeyDoc, TableDoc};
use tacc_mech::MechanismConfig;

/// A key: name, unit, default, range, doc.
macro_rules! key {
    ($key:literal, $unit:literal, $default:literal, $range:literal, $doc:literal $(,)?) => {
        KeyDoc {
            key: $key,
            unit: $unit,
            default: $default,
            range: $range,
            doc: $doc,
        }
    };
}

// Keys several tables take alike.
const VMS_PER_HOST: KeyDoc = key!(
    "vms_per_host",
    "integer",
    "1",
    ">= 1",
    "VMs on each host, named host/0, host/1, ... when there are several (the host's name is \
    its first VM).",
);
const LINK_RATE: KeyDoc = key!(
    "link_rate",
    "rate",
    "required",
    "> 0",
    "Rate of every link.",
);
const LINK_DELAY: KeyDoc = key!(
    "link_delay",
    "time",
    "required",
    "",
    "Propagation delay of every link.",
);
const FLOWS_CC: KeyDoc = key!(
    "cc",
    "string",
    "tcp.cc",
    "\"newreno\", \"cubic\" or \"dctcp\"",
    "Congestion control of these flows.",
);
const ECN: KeyDoc = key!(
    "ecn",
    "bool",
    "tcp.ecn",
    "",
    "Negotiate ECN (dctcp always does).",
);

const TOP: &[KeyDoc] = &[
    key!(
        "name",
        "string",
        "the file's stem",
        "",
        "Name shown in results.",
    ),
    key!(
        "description",
        "string",
        "none",
        "",
        "What the scenario is for, in a sentence; unset, nothing is said. It changes nothing in \
        the run.",
    ),
    key!(
        "duration",
        "time",
        "required",
        "> 0",
        "Simulated time: the run ends here.",
    ),
    key!(
        "seed",
        "integer",
        "1",
        "",
        "Seed of the run's one random number generator (a seed given to the run overrides it): a \
        run is a pure function of the file and the seed.",
    ),
    key!(
        "topology",
        "table",
        "required",
        "",
        "The network: kind = \"star\", \"dumbbell\", \"racks\", \"fat-tree\" or \"explicit\", \
        and that kind's keys.",
    ),
    key!(
        "queue",
        "table",
        "{}",
        "",
        "The switch ports' queues: discipline, limit, ECN marking and per-port overrides.",
    ),
    key!(
        "nic",
        "table",
        "{}",
        "",
        "The host NICs' egress queues and transmit timing noise.",
    ),
    key!(
        "tcp",
        "table",
        "{}",
        "",
        "TCP defaults for every flow; flows, incasts and traffic may override cc and ecn.",
    ),
    key!(
        "flows",
        "list of tables",
        "[]",
        "",
        "Flows and flow groups, one table each.",
    ),
    key!(
        "incast",
        "list of tables",
        "[]",
        "",
        "Partition/aggregate workloads: workers answer an aggregator, epoch after epoch.",
    ),
    key!(
        "traffic",
        "list of tables",
        "[]",
        "",
        "Open-loop flows among hosts: Poisson arrivals, sizes drawn from a CDF.",
    ),
    key!(
        "rules",
        "list of tables",
        "[]",
        "",
        "Match-action rules installed in the switches' flow tables.",
    ),
    key!(
        "loss",
        "list of tables",
        "[]",
        "",
        "Random loss on links: a model and the ports it applies to, one model a port.",
    ),
    key!(
        "mechanism",
        "table",
        "{ kind = \"none\" }",
        "",
        "The mechanism under test: kind and that kind's keys (tacc keys mechanism lists them). \
        Omitted, no mechanism.",
    ),
    key!(
        "output",
        "table",
        "{}",
        "",
        "What a run samples and captures: goodput bins, queue samples, packet captures.",
    ),
];
const STAR: &[KeyDoc] = &[
    key!(
        "senders",
        "integer",
        "required",
        "> 0",
        "Sender hosts s0, s1, ... on the switch sw0.",
    ),
    key!(
        "receivers",
        "integer",
        "required",
        "> 0",
        "Receiver hosts r0, r1, ... on the switch sw0.",
    ),
    LINK_RATE,
    LINK_DELAY,
    VMS_PER_HOST,
];
const DUMBBELL: &[KeyDoc] = &[
    key!(
        "senders",
        "integer",
        "required",
        "> 0",
        "Sender hosts s0, s1, ... on the left switch swL.",
    ),
    key!(
        "receivers",
        "integer",
        "required",
        "> 0",
        "Receiver hosts r0, r1, ... on the right switch swR.",
    ),
    key!(
        "link_rate",
        "rate",
        "required",
        "> 0",
        "Rate of every host link.",
    ),
    key!(
        "link_delay",
        "time",
        "required",
        "",
        "Propagation delay of every host link.",
    ),
    key!(
        "bottleneck_rate",
        "rate",
        "link_rate",
        "> 0",
        "Rate of the link between swL and swR.",
    ),
    key!(
        "bottleneck_delay",
        "time",
        "link_delay",
        "",
        "Propagation delay of the link between swL and swR.",
    ),
    VMS_PER_HOST,
];
const RACKS: &[KeyDoc] = &[
    key!(
        "racks",
        "integer",
        "required",
        "> 0",
        "Racks, each with its ToR switch tor0, tor1, ...",
    ),
    key!(
        "servers_per_rack",
        "integer",
        "required",
        "> 0",
        "Servers in each rack, named h{rack}_{i}.",
    ),
    key!(
        "aggs",
        "integer",
        "required",
        "> 0",
        "Aggregation switches agg0, agg1, ...; every ToR links to each.",
    ),
    key!(
        "cores",
        "integer",
        "1",
        "> 0",
        "Core switches core0, core1, ...; every aggregation switch links to each.",
    ),
    key!(
        "host_rate",
        "rate",
        "required",
        "> 0",
        "Rate of each server's link to its ToR.",
    ),
    key!(
        "tor_rate",
        "rate",
        "required",
        "> 0",
        "Rate of each ToR-to-aggregation link.",
    ),
    key!(
        "agg_rate",
        "rate",
        "required",
        "> 0",
        "Rate of each aggregation-to-core link.",
    ),
    LINK_DELAY,
    VMS_PER_HOST,
];
const FAT_TREE: &[KeyDoc] = &[
    key!(
        "k",
        "integer",
        "required",
        "even, >= 2",
        "Pods, and ports of every switch: k^3/4 hosts h0, h1, ..., k^2/4 core switches.",
    ),
    LINK_RATE,
    LINK_DELAY,
    VMS_PER_HOST,
];
const EXPLICIT: &[KeyDoc] = &[
    key!(
        "hosts",
        "names",
        "required",
        "distinct names",
        "The hosts; each must have exactly one link.",
    ),
    key!(
        "switches",
        "names",
        "required",
        "distinct names",
        "The switches.",
    ),
    key!(
        "links",
        "list of tables",
        "required",
        "",
        "The links, one table each (topology.links).",
    ),
    VMS_PER_HOST,
];
const LINKS: &[KeyDoc] = &[
    key!("a", "name", "required", "", "One end: a host or switch."),
    key!(
        "b",
        "name",
        "required",
        "differs from a",
        "The other end: a host or switch.",
    ),
    key!(
        "rate",
        "rate",
        "required",
        "> 0",
        "Rate of the link, each way.",
    ),
    key!(
        "delay",
        "time",
        "required",
        "",
        "Propagation delay of the link.",
    ),
];
const QUEUE: &[KeyDoc] = &[
    key!(
        "kind",
        "string",
        "\"red-ecn\"",
        "\"red-ecn\", \"droptail\" or \"red\"",
        "red-ecn: ECT packets are CE-marked, others dropped, when the queue holds k or more on \
        arrival (the papers' setting); droptail; red: classic RED on the averaged queue (Floyd \
        and Jacobson).",
    ),
    key!(
        "limit",
        "size",
        "100pkt",
        "> 0 and < 2^31 packets or bytes",
        "Buffer of each switch port: packets beyond it are dropped.",
    ),
    key!(
        "k",
        "size",
        "20pkt",
        "< 2^31 packets or bytes",
        "Marking threshold for red-ecn.",
    ),
    key!(
        "min_th",
        "size",
        "5pkt (7500B where the limit is in bytes)",
        "< max_th",
        "Classic RED: the averaged queue above which packets are marked or dropped with a rising \
        probability. In the unit of the RED ports' limits.",
    ),
    key!(
        "max_th",
        "size",
        "15pkt (22500B where the limit is in bytes)",
        "> min_th",
        "Classic RED: the averaged queue above which every packet is marked or dropped.",
    ),
    key!(
        "max_p",
        "probability",
        "0.1",
        "0..1",
        "Classic RED: the marking or drop probability at max_th.",
    ),
    key!(
        "weight",
        "fraction",
        "0.002",
        "> 0 and <= 1",
        "Classic RED: the weight of each new sample in the averaged queue.",
    ),
    key!(
        "ecn",
        "bool",
        "true",
        "",
        "Classic RED marks ECT packets instead of dropping them.",
    ),
    key!(
        "overrides",
        "list of tables",
        "[]",
        "",
        "Queue configurations for specific ports (queue.overrides).",
    ),
];
const QUEUE_OVERRIDES: &[KeyDoc] = &[
    key!(
        "ports",
        "names",
        "required",
        "port names",
        "The ports, by name (e.g. \"sw0->r0\").",
    ),
    key!(
        "kind",
        "string",
        "queue.kind",
        "\"red-ecn\", \"droptail\" or \"red\"",
        "The discipline of these ports.",
    ),
    key!(
        "limit",
        "size",
        "queue.limit",
        "< 2^31 packets or bytes",
        "The buffer of these ports.",
    ),
    key!(
        "k",
        "size",
        "queue.k",
        "< 2^31 packets or bytes",
        "The red-ecn marking threshold of these ports.",
    ),
];
const NIC: &[KeyDoc] = &[
    key!(
        "limit",
        "size",
        "1000pkt",
        "< 2^31 packets or bytes",
        "Drop-tail limit of each host NIC's egress queue.",
    ),
    key!(
        "jitter",
        "time",
        "1 packet time at the NIC rate",
        "",
        "Random extra delay, uniform in [0, jitter], added to every packet a host NIC sends \
        (1500 bytes' time: 12 us at 1 Gb/s). Without any, equal-size packets phase-lock at a \
        shared queue and the same flow wins every free slot.",
    ),
];
const TCP: &[KeyDoc] = &[
    key!(
        "profile",
        "string",
        "\"classic\"",
        "\"classic\" or \"linux\"",
        "Whose defaults the keys left out take: \"classic\", the papers' simulators' TCP (ns-2: \
        RFC 6675 recovery, initial window 2, an ACK per segment); \"linux\", Linux 6.x's (RACK-TLP, \
        PRR, initial window 10, quick-ACK then delayed ACKs, HyStart, Cubic's clamp, Minshall's \
        rule). A key given wins.",
    ),
    key!(
        "cc",
        "string",
        "\"newreno\"",
        "\"newreno\", \"cubic\" or \"dctcp\"",
        "Congestion control of every flow that does not give its own.",
    ),
    key!(
        "ecn",
        "bool",
        "false",
        "",
        "Negotiate ECN (RFC 3168); dctcp always does.",
    ),
    key!(
        "mss",
        "bytes",
        "1460B",
        "88B..65495B",
        "Maximum segment size.",
    ),
    key!(
        "init_cwnd",
        "integer",
        "2 (linux: 10)",
        ">= 1",
        "Initial window in segments.",
    ),
    key!(
        "rto_min",
        "time",
        "200ms",
        "<= 60s",
        "Floor of the retransmission timeout.",
    ),
    key!(
        "rto_init",
        "time",
        "1s",
        "> 0 and <= 60s",
        "Retransmission timeout before the first RTT sample.",
    ),
    key!(
        "delayed_ack",
        "bool",
        "false (linux: true)",
        "",
        "ACK every second full segment (or after delack_timeout) instead of every one.",
    ),
    key!(
        "delack_timeout",
        "time",
        "40ms",
        "",
        "Longest an ACK is delayed when delayed_ack is on.",
    ),
    key!(
        "sack",
        "bool",
        "true",
        "",
        "Selective acknowledgments (RFC 2018) and SACK-based loss recovery.",
    ),
    key!(
        "ecn_syn",
        "bool",
        "false",
        "",
        "Send SYN/SYN-ACK as ECT(0) when ECN is on (RFC 8311); off as RFC 3168 says.",
    ),
    key!(
        "ecn_retransmit",
        "bool",
        "false",
        "",
        "Send retransmissions as ECT(0) when ECN is on (ns-2 FullTcp); off as RFC 3168 says.",
    ),
    key!(
        "cwnd_validation",
        "bool",
        "false (linux: true)",
        "",
        "Grow cwnd only while cwnd-limited (Linux); off, it grows on every ACK (ns-2).",
    ),
    key!(
        "prr",
        "bool",
        "false (linux: true)",
        "",
        "Proportional Rate Reduction (RFC 6937, Linux's and ns-3's default); off, the window \
        drops to ssthresh at once (RFC 6675 and RFC 3168).",
    ),
    key!(
        "rack",
        "bool",
        "false (linux: true)",
        "",
        "RACK loss detection (RFC 8985): a segment is lost once one sent after it is delivered \
        and a reordering window (a quarter of the minimum RTT) has passed; off, RFC 6675's \
        dupthresh rule.",
    ),
    key!(
        "tlp",
        "bool",
        "false (linux: true)",
        "",
        "Tail loss probes (RFC 8985): two smoothed RTTs after the last send with nothing \
        acknowledged, one segment goes out so that a lost tail is repaired without the RTO. \
        Needs sack.",
    ),
    key!(
        "dsack",
        "bool",
        "false (linux: true)",
        "",
        "Receivers report duplicate segments in D-SACK blocks (RFC 2883), which tell a sender \
        its probe was not needed.",
    ),
    key!(
        "quickack",
        "bool",
        "false (linux: true)",
        "",
        "Linux's quick-ACK mode: a connection's first segments (up to 16) and data after a \
        hole are ACKed at once, before delayed ACKs apply.",
    ),
    key!(
        "rto_formula",
        "string",
        "\"rfc6298\" (linux: \"linux\")",
        "\"rfc6298\" or \"linux\"",
        "How the RTO follows the RTT: max(SRTT + 4 RTTVAR, rto_min) (RFC 6298), or Linux's \
        SRTT + max(4 RTTVAR, rto_min).",
    ),
    key!(
        "hystart",
        "bool",
        "false (linux: true)",
        "",
        "HyStart, Linux Cubic's slow-start exit: slow start ends when an ACK train spans half \
        the minimum RTT or the RTT grows by an eighth of it (4 to 16 ms). Cubic only.",
    ),
    key!(
        "cubic_clamp",
        "bool",
        "false (linux: true)",
        "",
        "Before its first loss or mark Cubic grows by at least a segment per 20 acknowledged \
        (Linux's and ns-3's Cubic); off, RFC 9438's curve alone, flat for seconds after \
        HyStart ends slow start. Cubic only.",
    ),
    key!(
        "minshall",
        "bool",
        "false (linux: true)",
        "",
        "A segment cut short by the peer's window goes out as the tail of new data that began \
        with room for a full segment, unless a short segment sent before is unacknowledged \
        (Linux's Nagle with Minshall's rule); off, only when nothing is in flight (sender SWS \
        avoidance). Under a window of a segment and a few bytes (SICC's clamp) a sender then \
        sends both each round trip.",
    ),
    key!(
        "half_window",
        "bool",
        "false (linux: true)",
        "",
        "A segment is at most half the largest window the peer has advertised (the whole \
        window up to 536 B; Linux's tcp_bound_to_half_wnd), growing back with that window. A \
        peer whose windows never exceed a segment (SICC's clamp from the SYN-ACK on) then gets \
        two half-size segments a round trip.",
    ),
    key!(
        "timestamps",
        "bool",
        "false (linux: true)",
        "",
        "Every ACK of data gives an RTT sample from the timestamp it echoes (RFC 7323), a \
        retransmission's included, and a sample ends the RTO's backoff (Linux's \
        tcp_ack_update_rtt). Off, Karn's rule: an acknowledged retransmission gives none and \
        the RTO stays doubled until new data is acknowledged. The option's 12 bytes are not \
        carried (a segment holds mss bytes of data; Linux's hold 12 fewer).",
    ),
    key!(
        "rcv_buf",
        "bytes",
        "2MB",
        ">= mss",
        "Receive buffer: the largest window a receiver advertises (its window scale follows from \
        it).",
    ),
    key!(
        "dupthresh",
        "integer",
        "3",
        ">= 1",
        "Duplicate ACKs that start fast retransmit.",
    ),
    key!(
        "dctcp_g",
        "fraction",
        "0.0625",
        "> 0 and <= 1",
        "DCTCP's gain g, the weight of each window's marked fraction in its average alpha.",
    ),
    key!(
        "small_queue",
        "time",
        "1ms",
        "",
        "TCP small queues: most data a connection keeps queued in its host (VM vNIC), as time at \
        the NIC rate (Linux: about 1 ms of the pacing rate).",
    ),
];
const FLOWS: &[KeyDoc] = &[
    key!(
        "name",
        "string",
        "required",
        "",
        "Name of the flow, or of the group (its flows are name.0 .. name.N-1).",
    ),
    key!(
        "count",
        "integer",
        "none",
        "> 0",
        "A group of count flows named name.0 .. name.N-1; \"{i}\" and \"{i+K}\" in src and dst \
        expand. Unset, one flow named name.",
    ),
    key!("src", "name", "required", "", "Sending host or VM."),
    key!(
        "dst",
        "name",
        "required",
        "",
        "Receiving host or VM, on another host and reachable from src.",
    ),
    key!(
        "transport",
        "string",
        "\"tcp\"",
        "\"tcp\" or \"udp\"",
        "TCP, or UDP at a constant bit rate.",
    ),
    key!("start", "time", "0s", "< duration", "When the flow opens."),
    key!(
        "jitter",
        "time",
        "0s",
        "",
        "Mean of an exponential delay added to each flow's start, so that a group's connections \
        open a little apart as a real volley does. Not with stop.",
    ),
    key!(
        "stop",
        "time",
        "none",
        "> start",
        "When the flow stops sending; unset, at the end of the run (or when its bytes are sent).",
    ),
    key!(
        "bytes",
        "bytes",
        "none",
        "> 0",
        "TCP: bytes to send then close; unset, unlimited until stop or the end of the run.",
    ),
    key!(
        "cc",
        "string",
        "tcp.cc",
        "\"newreno\", \"cubic\" or \"dctcp\"",
        "TCP: congestion control of the flow.",
    ),
    ECN,
    key!(
        "rate",
        "rate",
        "none",
        "> 0",
        "UDP: sending rate, constant while on; a UDP flow must give it.",
    ),
    key!(
        "packet_size",
        "bytes",
        "1500B",
        "64B..65535B",
        "UDP: IP packet size.",
    ),
    key!(
        "on",
        "time",
        "none",
        "> 0",
        "UDP on/off source: mean on period (exponentially distributed), given with off; unset, \
        always on.",
    ),
    key!(
        "off",
        "time",
        "none",
        "> 0",
        "UDP on/off source: mean off period (exponentially distributed), given with on.",
    ),
    key!(
        "reply_size",
        "bytes",
        "none",
        "64B..65535B",
        "UDP request/reply: the destination answers every packet with this many bytes; unset, no \
        replies.",
    ),
    key!(
        "drop_segments",
        "integer",
        "[]",
        "",
        "TCP: a list of data segments (numbered from 0) whose first transmission is dropped at \
        the sender's NIC.",
    ),
    key!(
        "return_delay",
        "time",
        "none",
        "",
        "TCP: the receiver's packets skip the network and reach the sender this long after \
        leaving its stack, plus its host's timing noise (a path whose way back is of no \
        interest). Not with a mechanism.",
    ),
    key!(
        "forge",
        "string",
        "none",
        "\"feedback\" or \"ipr\"",
        "UDP: the packets carry a signal only a shim may send, an attack on the mechanism: \
        HyGenICC's feedback packets or its IPR bit.",
    ),
    key!(
        "spoof",
        "name",
        "none",
        "",
        "UDP: the source address the packets carry, another VM's; unset, the sender's own.",
    ),
];
const INCAST: &[KeyDoc] = &[
    key!("name", "string", "required", "", "Name of the incast."),
    key!(
        "aggregator",
        "name",
        "required",
        "",
        "The host or VM every worker answers.",
    ),
    key!(
        "workers",
        "string",
        "required",
        "",
        "Worker names; \"{i}\" expands over count like flow groups.",
    ),
    key!("count", "integer", "required", "> 0", "Workers."),
    key!(
        "bytes",
        "bytes",
        "required",
        "> 0",
        "Bytes each worker returns per epoch.",
    ),
    key!("epochs", "integer", "1", ">= 1", "Rounds of requests."),
    key!(
        "start",
        "time",
        "0s",
        "< duration",
        "When the first epoch starts.",
    ),
    key!(
        "interval",
        "time",
        "none",
        "> 0",
        "Fixed epoch period, each epoch's workers starting on the clock; unset, each \
         epoch's requests leave the aggregator as the last answer of the one before arrives \
         (the first at start), and each worker answers when its request reaches it (each \
         link's delay and a 36 B packet's serialization, on the quickest path).",
    ),
    key!(
        "jitter",
        "time",
        "0s",
        "",
        "Mean of the exponential delay before each worker starts its response, drawn from \
         the incast's own random stream.",
    ),
    FLOWS_CC,
    ECN,
];
const TRAFFIC: &[KeyDoc] = &[
    key!(
        "name",
        "string",
        "required",
        "",
        "Name of the traffic source.",
    ),
    key!(
        "hosts",
        "names",
        "\"all\"",
        "\"all\" or at least two host names",
        "Hosts that send and receive.",
    ),
    key!(
        "cdf",
        "string",
        "required",
        "",
        "Flow sizes: \"websearch\", \"datamining\" or a path to a CDF file (lines \"bytes \
        cumulative_probability\").",
    ),
    key!(
        "load",
        "fraction",
        "required",
        "> 0 and <= 1",
        "Offered load as a fraction of each host's link rate.",
    ),
    key!(
        "start",
        "time",
        "0s",
        "< duration",
        "When the first flow may arrive.",
    ),
    key!(
        "stop",
        "time",
        "none",
        "",
        "When arrivals stop; unset, at the end of the run.",
    ),
    FLOWS_CC,
    ECN,
];
const RULES: &[KeyDoc] = &[
    key!(
        "switch",
        "name",
        "required",
        "",
        "The switch whose flow table gets the rule.",
    ),
    key!(
        "at",
        "time",
        "0s",
        "< duration",
        "When the rule is installed.",
    ),
    key!(
        "priority",
        "integer",
        "0",
        "0..65535",
        "The highest-priority matching rule applies.",
    ),
    key!(
        "hard_timeout",
        "time",
        "none",
        "> 0",
        "The rule is removed this long after it is installed; unset, never.",
    ),
    key!(
        "src",
        "name",
        "none",
        "",
        "Match: source host or VM; unset, any.",
    ),
    key!(
        "dst",
        "name",
        "none",
        "",
        "Match: destination host or VM; unset, any.",
    ),
    key!(
        "protocol",
        "string",
        "none",
        "\"tcp\", \"udp\" or 0..255",
        "Match: IP protocol, by name or number; unset, any.",
    ),
    key!(
        "sport",
        "integer",
        "none",
        "0..65535",
        "Match: source port; unset, any.",
    ),
    key!(
        "dport",
        "integer",
        "none",
        "0..65535",
        "Match: destination port; unset, any.",
    ),
    key!(
        "tcp_flags",
        "names",
        "[]",
        "",
        "Match: TCP flags that must be set (\"syn\") or clear (\"!ack\").",
    ),
    key!(
        "forward",
        "string",
        "\"normal\"",
        "\"normal\", \"drop\" or a port of the switch",
        "Action: \"normal\" (routing), \"drop\", or an output port name such as \"sw0->r0\".",
    ),
    key!(
        "set_ce",
        "bool",
        "false",
        "",
        "Action: CE-mark the matching packets.",
    ),
    key!(
        "copy_to_controller",
        "bool",
        "false",
        "",
        "Action: send a copy of the matching packets to the controller.",
    ),
];
const BERNOULLI: &[KeyDoc] = &[
    key!(
        "ports",
        "names",
        "required",
        "port names, \"all\", \"host->switch\", \"switch->host\" or \"switch->switch\"",
        "The ports whose sent packets are lost on the wire, by name or class.",
    ),
    key!(
        "rate",
        "probability",
        "required",
        "0..1",
        "Each packet is lost with this probability.",
    ),
];
const GILBERT_ELLIOTT: &[KeyDoc] = &[
    key!(
        "ports",
        "names",
        "required",
        "port names, \"all\", \"host->switch\", \"switch->host\" or \"switch->switch\"",
        "The ports whose sent packets are lost on the wire, by name or class.",
    ),
    key!(
        "p",
        "probability",
        "required",
        "0..1",
        "Probability of stepping from the good state to the bad, per packet (p and r not both \
        0).",
    ),
    key!(
        "r",
        "probability",
        "required",
        "0..1",
        "Probability of stepping from the bad state back to the good, per packet.",
    ),
    key!(
        "loss_good",
        "probability",
        "0",
        "0..1",
        "Fraction of its packets the good state loses.",
    ),
    key!(
        "loss_bad",
        "probability",
        "1",
        "0..1",
        "Fraction of its packets the bad state loses.",
    ),
];
const OUTPUT: &[KeyDoc] = &[
    key!(
        "goodput_bin",
        "time",
        "100ms",
        "> 0",
        "Width of the goodput time bins (at most 1,000,000 bins over the run).",
    ),
    key!(
        "queue_sample",
        "time",
        "1ms",
        "> 0",
        "Period of the queue samples (at most 10,000,000 over the run).",
    ),
    key!(
        "ports",
        "names",
        "none",
        "\"switches\", \"all\" or port names",
        "Ports sampled into queues.csv: \"switches\" (all switch ports), \"all\" or a list of \
        names; unset, every switch port up to 1,024, one in n on a larger fabric.",
    ),
    key!(
        "pcap",
        "names",
        "[]",
        "port names",
        "Ports whose sent packets are written to pcap/<port>.pcapng (a run with an output \
        directory): headers as on the wire, simulated timestamps.",
    ),
    key!(
        "pcap_dropped",
        "bool",
        "false",
        "",
        "Captures also hold the packets the port's queue dropped, each with a comment saying so, \
        at the time it was refused.",
    ),
];

fn table(
    table: &'static str,
    tag: Option<(&'static str, &'static str)>,
    array: bool,
    doc: &'static str,
    keys: &[KeyDoc],
) -> TableDoc {
    TableDoc {
        table,
        tag,
        array,
        doc,
        keys: keys.to_vec(),
    }
}

/// Every table of a scenario file, in the order a file usually has them; the top level's keys
/// are the table named "".
pub fn tables() -> Vec<TableDoc> {
    let kind = |v| Some(("kind", v));
    let model = |v| Some(("model", v));
    let mut t = vec![
        table("", None, false, "The top level of the file.", TOP),
        table(
            "topology",
            kind("star"),
            false,
            "N senders and M receivers on one switch; the bottleneck is the switch port to a \
             receiver.",
            STAR,
        ),
        table(
            "topology",
            kind("dumbbell"),
            false,
            "Senders on a left switch, receivers on a right switch, one bottleneck link between \
             them.",
            DUMBBELL,
        ),
        table(
            "topology",
            kind("racks"),
            false,
            "Servers -> ToR -> aggregation -> core; every ToR links to every aggregation switch \
             and every aggregation switch to every core switch.",
            RACKS,
        ),
        table(
            "topology",
            kind("fat-tree"),
            false,
            "The k-ary fat tree (k pods, k^3/4 hosts), all links at one rate.",
            FAT_TREE,
        ),
        table(
            "topology",
            kind("explicit"),
            false,
            "Nodes and links listed one by one.",
            EXPLICIT,
        ),
        table(
            "topology.links",
            None,
            true,
            "A link of an explicit topology: its two ends, rate and delay.",
            LINKS,
        ),
        table(
            "queue",
            None,
            false,
            "The switch ports' queues: red-ecn (the papers' setting), drop-tail or classic RED.",
            QUEUE,
        ),
        table(
            "queue.overrides",
            None,
            true,
            "A queue configuration for specific ports (by name, e.g. \"sw0->r0\").",
            QUEUE_OVERRIDES,
        ),
        table(
            "nic",
            None,
            false,
            "The host NICs' drop-tail egress queues and their transmit timing noise.",
            NIC,
        ),
        table(
            "tcp",
            None,
            false,
            "TCP defaults for every flow; flows may override cc and ecn.",
            TCP,
        ),
        table(
            "flows",
            None,
            true,
            "A flow, or a group of count flows, from a host or VM to another, over TCP or UDP.",
            FLOWS,
        ),
        table(
            "incast",
            None,
            true,
            "Partition/aggregate: count workers each return bytes to an aggregator, epoch after \
             epoch.",
            INCAST,
        ),
        table(
            "traffic",
            None,
            true,
            "Open-loop flows among hosts: Poisson arrivals offering a load, sizes drawn from a \
             CDF.",
            TRAFFIC,
        ),
        table(
            "rules",
            None,
            true,
            "A match-action rule installed in a switch's flow table at time at.",
            RULES,
        ),
        table(
            "loss",
            model("bernoulli"),
            true,
            "Random loss on the ports named (or of a class), each packet lost with probability \
             rate.",
            BERNOULLI,
        ),
        table(
            "loss",
            model("gilbert-elliott"),
            true,
            "Bursty loss: a good and a bad state, stepped per packet, each losing a fraction of \
             its packets.",
            GILBERT_ELLIOTT,
        ),
    ];
    t.extend(MechanismConfig::tables());
    t.push(table(
        "output",
        None,
        false,
        "What a run samples and captures.",
        OUTPUT,
    ));
    t
}

/// The tables and keys `name` picks ("tcp", "tcp.rto_min", "mechanism.sicc",
/// "mechanism.sicc.interval", "duration"; a table without its tag's value picks every variant).
/// Empty where it names nothing.
pub fn lookup(name: &str) -> Vec<TableDoc> {
    // What follows `prefix.` in the name; the top level's keys follow nothing.
    let after = |prefix: &str| match prefix {
        "" => Some(name),
        p => name.strip_prefix(p)?.strip_prefix('.'),
    };
    let mut found = Vec::new();
    for t in tables() {
        let full = t.name();
        if name == full || (t.tag.is_some() && name == t.table) {
            found.push(t);
            continue;
        }
        let Some(key) = after(&full).or_else(|| after(t.table)) else {
            continue;
        };
        if let Some(k) = t.keys.iter().find(|k| k.key == key) {
            found.push(TableDoc {
                keys: vec![*k],
                ..t
            });
        }
    }
    found
}
