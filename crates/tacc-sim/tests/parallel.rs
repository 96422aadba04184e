//! A partitioned run (`tacc_sim::parallel`) writes the same files however many threads run
//! it: the partitions are the scenario's, each runs alone between exchanges of the packets
//! that cross between them, and what each does depends on its own events and its mail only.

use std::collections::BTreeMap;
use tacc_sim::RunOptions;

/// A k = 4 fat tree (16 hosts, 4 pods), every link 1 Gb/s and 1 us, DCTCP on RED-ECN, with
/// open-loop web-search traffic at `load` (0 for none) and `extra` tables.
fn fat_tree(load: f64, extra: &str) -> String {
    let traffic = match load {
        0.0 => String::new(),
        _ => format!("[[traffic]]\nname = \"web\"\ncdf = \"websearch\"\nload = {load}\n"),
    };
    format!(
        "name = \"ft\"\nduration = \"60ms\"\n[topology]\nkind = \"fat-tree\"\nk = 4\n\
         link_rate = \"1Gbps\"\nlink_delay = \"1us\"\n[queue]\nkind = \"red-ecn\"\n\
         limit = \"100pkt\"\nk = \"20pkt\"\n[tcp]\ncc = \"dctcp\"\necn = true\n\
         [output]\nqueue_sample = \"1ms\"\n{traffic}{extra}"
    )
}

/// Every result file of one run, by name: summary.json without its wall time, and each CSV.
fn files(text: &str, threads: usize, partitions: Option<usize>) -> BTreeMap<String, String> {
    let p = tacc_sim::load(text, "test.toml", &[], None).unwrap_or_else(|e| panic!("{e}"));
    let dir = std::env::temp_dir().join(format!(
        "tacc-parallel-{}-{threads}-{partitions:?}-{:x}",
        std::process::id(),
        text.len() * 7919 + text.bytes().map(|b| b as usize).sum::<usize>()
    ));
    let opts = RunOptions {
        threads,
        partitions,
    };
    let summary = tacc_sim::run_into(p, &dir, opts, &mut |_, _| {}).unwrap();
    assert!(summary.conservation.ok, "packet conservation violated");
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&path).unwrap();
        let text = match name.as_str() {
            "summary.json" => {
                let kept: Vec<&str> = text
                    .lines()
                    .filter(|l| !l.contains("wall_seconds"))
                    .collect();
                kept.join("\n")
            }
            n if n.ends_with(".csv") => text,
            _ => continue,
        };
        out.insert(name, text);
    }
    std::fs::remove_dir_all(&dir).unwrap();
    out
}

fn partitions(files: &BTreeMap<String, String>) -> serde_json::Value {
    let summary: serde_json::Value = serde_json::from_str(&files["summary.json"]).unwrap();
    summary["partitions"].clone()
}

/// Runs `text` on 1, 2 and 4 threads and checks that the files are the same, byte for byte;
/// returns them.
fn same_on_any_threads(text: &str, want: Option<usize>) -> BTreeMap<String, String> {
    let one = files(text, 1, want);
    for threads in [2, 4] {
        let other = files(text, threads, want);
        for (name, content) in &one {
            assert!(
                other.get(name) == Some(content),
                "{name} differs between 1 and {threads} threads"
            );
        }
        assert_eq!(one.len(), other.len());
    }
    one
}

/// 8 workers in pods 1 and 2 answering an aggregator in pod 0, 20 KB each, every 5 ms.
const INTERVAL_INCAST: &str = "[[incast]]\nname = \"ia\"\naggregator = \"h0\"\n\
                               workers = \"h{i+4}\"\ncount = 8\nbytes = \"20KB\"\nepochs = 8\n\
                               interval = \"5ms\"\njitter = \"20us\"\n";

/// 8 workers answering an aggregator in pod 0, 20 KB each: h1 in its rack, h2 and h3 in its
/// pod, the rest in pods 1 and 2; each epoch's requests leave when the last answer is in.
const CLOSED_LOOP_INCAST: &str = "[[incast]]\nname = \"cl\"\naggregator = \"h0\"\n\
                                  workers = \"h{i+1}\"\ncount = 8\nbytes = \"20KB\"\n\
                                  epochs = 12\njitter = \"20us\"\n";

#[test]
fn a_fat_tree_split_by_pods_writes_the_same_files_on_1_2_and_4_threads() {
    let cases = [
        // Open-loop traffic, drawn in every partition.
        fat_tree(0.5, ""),
        // Random loss on links between partitions and inside them, and scripted flows, one
        // of them UDP and one stopped early.
        fat_tree(
            0.3,
            "[[loss]]\nmodel = \"bernoulli\"\nports = [\"core0->agg0_0\", \"agg1_0->edge1_0\"]\n\
             rate = 0.01\n[[flows]]\nname = \"bulk\"\nsrc = \"h0\"\ndst = \"h15\"\n\
             stop = \"40ms\"\n[[flows]]\nname = \"udp\"\nsrc = \"h5\"\ndst = \"h9\"\n\
             transport = \"udp\"\nrate = \"300Mbps\"\n",
        ),
        // A partition-aggregate application on an interval, its workers in other pods than
        // its aggregator, their answers delayed from the application's own stream.
        fat_tree(0.3, INTERVAL_INCAST),
        // One without: each epoch begins when the last answer is in, in the aggregator's
        // partition, and its requests reach workers in its rack, its pod and other pods.
        fat_tree(0.3, CLOSED_LOOP_INCAST),
    ];
    // Host shims (HyGenICC, static-rate), a controller reading switch counters and telling
    // shims (SDN-GCC), one predicting incasts from copied SYNs (SICC), one installing
    // marking rules (SDN-ECN), and a switch hook (RWNDQ).
    let shims = [
        "kind = \"hygenicc\"\non_shortage = \"queue\"\n",
        "kind = \"static-rate\"\nrate = \"400Mbps\"\n",
        "kind = \"sdn-gcc\"\ninterval = \"1ms\"\nlatency = \"50us\"\n",
        "kind = \"sicc\"\nlatency = \"50us\"\n",
        "kind = \"sdn-ecn\"\ninterval = \"10ms\"\nrule_timeout = \"20ms\"\nlatency = \"50us\"\n",
        "kind = \"rwndq\"\n",
    ]
    .map(|m| format!("[mechanism]\n{m}"));
    let udp = "[[flows]]\nname = \"udp\"\nsrc = \"h5\"\ndst = \"h9\"\ntransport = \"udp\"\n\
               rate = \"1Gbps\"\n";
    // Host shims run in their hosts' partitions; HyGenICC's feedback crosses in packets.
    // Their controller runs in partition 0; with 50 us of control latency the links' 1.288
    // us stay the lookahead. Each beside a back-to-back incast across the pods (SICC's
    // controller predicts its epochs from the SYNs copied to it).
    let with_shims = shims
        .map(|m| fat_tree(0.3, &format!("{m}{udp}{CLOSED_LOOP_INCAST}")).replace("60ms", "30ms"));
    for text in cases.iter().chain(&with_shims) {
        let files = same_on_any_threads(text, Some(4));
        assert_eq!(partitions(&files)["count"], 4, "one partition per pod");
        // 1 us of propagation and a 36 B feedback packet's 288 ns on the links between pods.
        assert_eq!(partitions(&files)["lookahead_s"], 1.288e-6);
    }
    // The signals crossed: HyGenICC's feedback packets, and the controllers' messages.
    for (text, kind) in with_shims
        .iter()
        .zip(["hygenicc", "", "sdn-gcc", "sicc", "sdn-ecn"])
    {
        if kind.is_empty() {
            continue;
        }
        let files = files(text, 2, Some(4));
        let summary: serde_json::Value = serde_json::from_str(&files["summary.json"]).unwrap();
        let sent = summary["mechanism"]["control_messages_total"]
            .as_u64()
            .unwrap();
        assert!(sent > 0, "{kind}: no control message");
    }
}

#[test]
fn what_cannot_be_split_runs_as_one_partition_and_says_why() {
    // Two racks whose uplinks take 100 us, their hosts' links 1 us: an incast without an
    // interval whose requests reach a worker in the aggregator's rack in 2 us begins its next
    // epoch sooner than the other rack's partition can hear of it.
    let link = |a: &str, b: &str, d: &str| {
        format!("{{a = \"{a}\", b = \"{b}\", rate = \"1Gbps\", delay = \"{d}\"}}")
    };
    let links = [
        link("h0", "t0", "1us"),
        link("h1", "t0", "1us"),
        link("h2", "t1", "1us"),
        link("h3", "t1", "1us"),
        link("t0", "c", "100us"),
        link("t1", "c", "100us"),
    ]
    .join(", ");
    let racks = format!(
        "name = \"r\"\nduration = \"20ms\"\n[topology]\nkind = \"explicit\"\n\
         hosts = [\"h0\", \"h1\", \"h2\", \"h3\"]\nswitches = [\"t0\", \"t1\", \"c\"]\n\
         links = [{links}]\n[[incast]]\nname = \"ia\"\naggregator = \"h0\"\n\
         workers = \"h{{i+1}}\"\ncount = 3\nbytes = \"20KB\"\nepochs = 3\n"
    );
    // A controller whose messages take no time cannot run apart from its switches.
    let instant = "[mechanism]\nkind = \"sdn-gcc\"\n[[flows]]\nname = \"a\"\nsrc = \"h0\"\n\
                   dst = \"h15\"\n";
    // A rule can hand a packet to another host than its endpoint's, in another partition.
    let misdeliver = "[[flows]]\nname = \"a\"\nsrc = \"h0\"\ndst = \"h15\"\nbytes = \"50KB\"\n\
                      [[rules]]\nswitch = \"edge0_0\"\npriority = 10\ndst = \"h15\"\n\
                      forward = \"edge0_0->h1\"\n";
    for (text, want, why) in [
        (fat_tree(0.0, instant), Some(4), "control channel"),
        (fat_tree(0.0, misdeliver), Some(4), "rules that forward"),
        (racks, Some(2), "reaches a worker in 2576 ns"),
        // 16 hosts: too small for partitions unless asked.
        (fat_tree(0.3, ""), None, "16 hosts"),
    ] {
        let files = same_on_any_threads(&text, want);
        let parts = partitions(&files);
        assert_eq!(parts["count"], 1);
        let because = parts["one_because"].as_str().unwrap();
        assert!(because.contains(why), "{because}");
    }
}

/// The partitions change the order of simultaneous events and the random streams, as
/// another seed would, not the traffic: the same flows (open-loop arrivals come from their
/// source's own stream), every packet accounted for.
#[test]
fn a_split_run_carries_the_same_flows_as_a_whole_one() {
    let text = fat_tree(0.5, &format!("{INTERVAL_INCAST}{CLOSED_LOOP_INCAST}"));
    let whole = files(&text, 1, Some(1));
    let split = files(&text, 2, Some(4));
    // Each of the incasts' answers completes, split or not: 64 on the interval, and the 96
    // of 12 epochs back to back (about 2.5 ms each beside the traffic).
    let answered = |f: &BTreeMap<String, String>, group: &str| {
        let summary: serde_json::Value = serde_json::from_str(&f["summary.json"]).unwrap();
        let flows = summary["flows"].as_array().unwrap();
        flows
            .iter()
            .filter(|f| f["group"] == group && f["completed"] == true)
            .count()
    };
    assert_eq!((answered(&whole, "ia"), answered(&split, "ia")), (64, 64));
    assert_eq!((answered(&whole, "cl"), answered(&split, "cl")), (96, 96));
    let flows = |f: &BTreeMap<String, String>| -> Vec<String> {
        // name, group, src, dst: the columns the traffic alone decides.
        f["flows.csv"]
            .lines()
            .map(|l| l.split(',').take(4).collect::<Vec<_>>().join(","))
            .collect()
    };
    // About 40 arrivals (16 hosts at half of 1 Gb/s for 60 ms, in flows of 1.6 MB on
    // average) and the incasts' 160. A back-to-back epoch's flows are made when its
    // requests reach the nearest worker, which may tie with an arrival: the order may
    // differ, as that of simultaneous events does.
    let sorted = |f: &BTreeMap<String, String>| {
        let mut v = flows(f);
        v.sort();
        v
    };
    assert!(flows(&whole).len() > 200, "{} flows", flows(&whole).len());
    assert_eq!(sorted(&whole), sorted(&split));
}

#[test]
fn a_fabric_of_1024_hosts_is_split_in_two_unless_asked_otherwise() {
    let k16 = fat_tree(0.5, "")
        .replace("k = 4\n", "k = 16\n")
        .replace("60ms", "2ms");
    let default = same_on_any_threads(&k16, None);
    assert_eq!(partitions(&default)["count"], 2);
    let asked = files(&k16, 2, Some(8));
    assert_eq!(partitions(&asked)["count"], 8);
}

/// A core switch that forwards by its table alone runs each port with the pod it feeds: a
/// packet between pods of two partitions crosses once, into its destination's partition,
/// never through a third, and one between pods of the same partition never crosses.
#[test]
fn a_packet_between_pods_crosses_once_into_its_destinations_partition() {
    // Pods 0 and 1 to pods 3 and 2 (h{4i}..h{4i+3} in pod i), one flow per host, on every
    // core by ECMP.
    let flows = |dst: &dyn Fn(usize) -> usize| -> String {
        (0..8)
            .map(|i| {
                format!(
                    "[[flows]]\nname = \"f{i}\"\nsrc = \"h{i}\"\ndst = \"h{}\"\n\
                     bytes = \"300KB\"\n",
                    dst(i)
                )
            })
            .collect()
    };
    let mail_and_sent = |text: &str, partitions| {
        let files = files(text, 2, Some(partitions));
        let summary: serde_json::Value = serde_json::from_str(&files["summary.json"]).unwrap();
        let all = &summary["partitions"]["critical_events"][0];
        assert_eq!(all["cores"], 1);
        let c = &summary["conservation"];
        let sent = c["sent"].as_u64().unwrap();
        (
            all["mail"].as_u64().unwrap(),
            sent,
            c["dropped"].as_u64().unwrap(),
        )
    };
    // 4 partitions, one per pod: every packet (data, ACKs, handshakes) crosses once, unless
    // it is dropped on the way.
    let (mail, sent, dropped) = mail_and_sent(&fat_tree(0.0, &flows(&|i| 15 - i)), 4);
    assert!(sent > 8 * 300_000 / 1500, "{sent} packets sent");
    assert!(
        mail <= sent && mail + dropped >= sent,
        "{mail} crossings for {sent} packets, {dropped} dropped"
    );
    // 2 partitions, pods 0 and 1 in the first: from pod 0 to pod 1 through the cores, no
    // packet crosses.
    let (mail, sent, _) = mail_and_sent(&fat_tree(0.0, &flows(&|i| (i + 4) % 8)), 2);
    assert!(sent > 8 * 300_000 / 1500, "{sent} packets sent");
    assert_eq!(mail, 0, "{mail} crossings within a partition's pods");
}
