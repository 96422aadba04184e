//! Traffic sources and topologies beyond the single bottleneck: UDP on/off and request/reply,
//! periodic and back-to-back incast epochs, open-loop flows from the shipped CDFs on a fat tree and on racks.

mod common;
use common::*;

#[test]
fn on_off_udp_averages_rate_times_duty_cycle() {
    let (_, s) = run(&star(1, "20s", "[[flows]]\nname = \"u\"\nsrc = \"s0\"\ndst = \"r0\"\ntransport = \"udp\"\nrate = \"100Mbps\"\non = \"10ms\"\noff = \"30ms\"\n"));
    // Duty cycle 1/4 of 100 Mb/s at 1472/1500 payload: 24.5 Mb/s; 500 on/off cycles give
    // a relative standard error of about 5%, so allow 20%.
    let g = flow(&s, "u").goodput_mbps;
    assert!((19.6..29.4).contains(&g), "on/off goodput {g:.2} Mb/s");
}

#[test]
fn request_reply_udp_carries_both_directions() {
    let (_, s) = run(&star(1, "1s", "[[flows]]\nname = \"rr\"\nsrc = \"s0\"\ndst = \"r0\"\ntransport = \"udp\"\nrate = \"10Mbps\"\npacket_size = \"100B\"\nreply_size = \"1000B\"\n"));
    // 10 Mb/s of 100-byte requests = 12,500 per second, each answered with 1000 bytes.
    let f = flow(&s, "rr");
    let requests = port(&s, "s0->sw0").enqueued;
    let replies = port(&s, "r0->sw0").enqueued;
    assert!((12_000..=13_000).contains(&requests), "{requests} requests");
    assert!(
        replies + 5 >= requests && replies <= requests,
        "{replies} replies to {requests} requests"
    );
    // UDP payloads: 72 B per request, 972 B per reply; a few may still be in flight at the end.
    let sent = requests * 72 + replies * 972;
    assert!(
        f.bytes_delivered <= sent && f.bytes_delivered + 5 * 1044 >= sent,
        "{} of {sent} bytes",
        f.bytes_delivered
    );
}

#[test]
fn periodic_incast_runs_every_epoch_with_new_connections() {
    let (_, s) = run(&star(8, "1s", "[[incast]]\nname = \"q\"\naggregator = \"r0\"\nworkers = \"s{i}\"\ncount = 8\nbytes = \"10KB\"\nepochs = 5\ninterval = \"100ms\"\njitter = \"24us\"\n"));
    assert_eq!(s.flows.len(), 40);
    assert!(s.flows.iter().all(|f| f.completed));
    for e in 0..5 {
        let starts: Vec<f64> = s
            .flows
            .iter()
            .filter(|f| f.name.ends_with(&format!(".{e}")))
            .map(|f| f.start)
            .collect();
        assert_eq!(starts.len(), 8);
        assert!(
            starts
                .iter()
                .all(|&t| t >= 0.1 * e as f64 && t < 0.1 * e as f64 + 0.01),
            "epoch {e} starts {starts:?}"
        );
    }
}

#[test]
fn a_back_to_back_incast_asks_again_when_the_last_answer_is_in() {
    // Some epochs wait out a 200 ms RTO (8 answers at once, without ECN): 3 s for 5.
    let (sim, s) = run(&star(8, "3s", "[[incast]]\nname = \"q\"\naggregator = \"r0\"\nworkers = \"s{i}\"\ncount = 8\nbytes = \"10KB\"\nepochs = 5\n"));
    assert_eq!(s.flows.len(), 40);
    assert!(s.flows.iter().all(|f| f.completed));
    // A request, the smallest packet (36 B, 288 ns at 1 Gb/s), crosses two 25 us links.
    let flight = 2 * (25_000 + 288);
    let epoch = |e: u32| {
        sim.m
            .flows
            .iter()
            .filter(move |f| f.name.ends_with(&format!(".{e}")))
    };
    assert!(
        epoch(0).all(|f| f.start == flight),
        "the first requests leave at 0"
    );
    for e in 1..5 {
        let last_answer = epoch(e - 1).map(|f| f.end.unwrap()).max().unwrap();
        let starts: Vec<u64> = epoch(e).map(|f| f.start).collect();
        assert_eq!(starts, vec![last_answer + flight; 8], "epoch {e}");
    }
}

#[test]
fn websearch_traffic_on_a_fat_tree_offers_the_requested_load() {
    let (_, s) = run("name = \"ft\"\nduration = \"2s\"\n[topology]\nkind = \"fat-tree\"\nk = 4\nlink_rate = \"1Gbps\"\nlink_delay = \"1us\"\n[tcp]\ncc = \"dctcp\"\n[[traffic]]\nname = \"web\"\ncdf = \"websearch\"\nload = 0.3\n");
    // 16 hosts x 0.3 x 1 Gb/s / (8 x 1.67 MB) = 360 flows/s: about 720 in 2 s (Poisson, sd ~27).
    let n = s.flows.len();
    assert!((600..850).contains(&n), "{n} flows");
    let done = s.flows.iter().filter(|f| f.completed).count();
    assert!(done as f64 >= 0.8 * n as f64, "{done} of {n} completed");
    let bytes: u64 = s.flows.iter().map(|f| f.bytes_delivered).sum();
    let offered = 16.0 * 0.3 * 1e9 / 8.0 * 2.0;
    assert!(
        bytes as f64 > 0.5 * offered,
        "delivered {bytes} of ~{offered} offered bytes"
    );
}

#[test]
fn rack_topology_carries_cross_rack_elephants_through_the_aggregation_tier() {
    let (_, s) = run("name = \"racks\"\nduration = \"1s\"\n[topology]\nkind = \"racks\"\nracks = 3\nservers_per_rack = 4\naggs = 2\nhost_rate = \"1Gbps\"\ntor_rate = \"5Gbps\"\nagg_rate = \"10Gbps\"\nlink_delay = \"25us\"\n[[flows]]\nname = \"e\"\ncount = 4\nsrc = \"h0_{i}\"\ndst = \"h2_{i}\"\n");
    for i in 0..4 {
        let g = flow(&s, &format!("e.{i}")).goodput_mbps;
        assert!(g > 850.0, "elephant {i}: {g:.0} Mb/s");
    }
    let through_aggs: u64 = s
        .ports
        .iter()
        .filter(|p| p.name.starts_with("agg"))
        .map(|p| p.tx_bytes)
        .sum();
    assert!(through_aggs > 0);
}

#[test]
fn a_jittered_flow_group_opens_its_connections_an_exponential_delay_apart() {
    let group = "[[flows]]\nname = \"m\"\ncount = 400\nsrc = \"s{i}\"\ndst = \"r0\"\nstart = \"10ms\"\njitter = \"1ms\"\nbytes = \"1KB\"\n";
    let (_, s) = run(&star(400, "1s", group));
    let delays: Vec<f64> = s.flows.iter().map(|f| (f.start - 0.010) * 1e3).collect();
    assert!(delays.iter().all(|&d| d >= 0.0));
    // An exponential of mean 1 ms: 400 draws have a mean within 3 standard errors (15%) of
    // it, and about 1 - 1/e = 63% of them fall below the mean.
    let mean = delays.iter().sum::<f64>() / delays.len() as f64;
    assert!((0.85..1.15).contains(&mean), "mean delay {mean:.3} ms");
    let below = delays.iter().filter(|&&d| d < 1.0).count() as f64 / 400.0;
    assert!((0.55..0.71).contains(&below), "{below:.2} below the mean");
}

const FAT_TREE_K4: &str = "name = \"ft\"\nduration = \"2s\"\n[topology]\nkind = \"fat-tree\"\nk = 4\nlink_rate = \"1Gbps\"\nlink_delay = \"1us\"\n[tcp]\ncc = \"dctcp\"\n";

#[test]
fn a_flows_path_drawn_without_a_run_is_the_one_its_packets_take() {
    // One flow between pods: the ports that carry its data (its ACKs are small, and may hash
    // onto other cores) are exactly the path `tcp_path` gives for its 5-tuple.
    let text = format!(
        "{FAT_TREE_K4}[[flows]]\nname = \"x\"\nsrc = \"h0\"\ndst = \"h15\"\nbytes = \"200KB\"\n"
    );
    let (sim, s) = run(&text);
    let f = &sim.m.flows[0];
    let path = sim.m.tcp_path(f.src_vm, f.dst_vm, f.sport, f.dport);
    assert_eq!(path.len(), 6);
    let carried: Vec<u32> = (0..s.ports.len() as u32)
        .filter(|&p| s.ports[p as usize].tx_bytes > 100_000)
        .collect();
    let mut sorted = path.clone();
    sorted.sort_unstable();
    assert_eq!(carried, sorted);
}

#[test]
fn a_workload_drawn_without_a_run_is_the_runs_traffic() {
    let text =
        format!("{FAT_TREE_K4}[[traffic]]\nname = \"web\"\ncdf = \"websearch\"\nload = 0.3\n")
            .replace("duration = \"2s\"", "duration = \"0.5s\"");
    let mut p = tacc_sim::load(&text, "test.toml", &[], None).unwrap();
    let flows = tacc_sim::workload::generate(&mut p.model);
    // As for a run (websearch_traffic_on_a_fat_tree_offers_the_requested_load): ~180 in 0.5 s.
    assert!((130..240).contains(&flows.len()), "{} flows", flows.len());
    assert!(flows.windows(2).all(|w| w[0].start <= w[1].start));
    let hosts = &p.model.hosts;
    for f in &flows {
        assert_ne!(f.src_vm, f.dst_vm);
        assert_eq!(
            f.ports[0],
            hosts[p.model.vms[f.src_vm as usize].host as usize].nic_port
        );
        let last = &p.model.ports[*f.ports.last().unwrap() as usize];
        let dst_host = p.model.vms[f.dst_vm as usize].host;
        assert_eq!(last.to(), tacc_sim::topology::NodeRef::Host(dst_host));
        assert!([2, 4, 6].contains(&f.ports.len()));
    }
    // Runs that draw differently from the run's own stream (a transport with other sequence
    // numbers and timings, an AQM that draws at random) carry the very same flows, on the
    // same paths.
    let drawn: Vec<_> = flows
        .iter()
        .map(|f| {
            (
                f.name.clone(),
                f.src_vm,
                f.dst_vm,
                f.bytes,
                f.start,
                f.ports.clone(),
            )
        })
        .collect();
    for variant in [
        text.clone(),
        text.replace("cc = \"dctcp\"", "cc = \"cubic\"")
            + "[queue]\nkind = \"red\"\nlimit = \"100pkt\"\nmin_th = \"5pkt\"\nmax_th = \"15pkt\"\nmax_p = 0.1\nweight = 0.002\n",
    ] {
        let (sim, _) = run(&variant);
        let ran: Vec<_> = sim
            .m
            .flows
            .iter()
            .map(|f| {
                let path = sim.m.tcp_path(f.src_vm, f.dst_vm, f.sport, f.dport);
                (f.name.clone(), f.src_vm, f.dst_vm, f.bytes.unwrap(), f.start, path)
            })
            .collect();
        assert_eq!(ran, drawn);
    }
}
