//! A run split into partitions, each on a thread of its own, with results that do not depend
//! on the number of threads.
//!
//! The partitions are the scenario's, never the machine's: a fat tree's pods, a two-tier
//! fabric's racks (what is left joined when the top tier of switches is taken away, each
//! top-tier switch then going with one of them in turn, or, if it forwards by its table
//! alone, each of its ports with the node it feeds). Each partition runs its own copy of
//! the world ([`Model`]) with its own event queue, packet arena and random stream, and only
//! its own hosts', switches' and ports' events. A packet leaving for another partition's
//! node or port goes there by value ([`Outbox`]) and arrives no sooner than the lookahead:
//! the least delay plus serialization of a link between two partitions. Time is cut into
//! windows of half a lookahead, from 0: what a partition sends in a window is due two
//! windows on at the earliest, and it takes its mail just before that window, in the order
//! of the partitions that sent it and of their sending. So a thread starts a window once
//! every thread has finished the one two before, and may run up to a window ahead of the
//! slowest rather than meet it at every lookahead. What a partition does is a function of
//! its own events and its mail, and both are the same whichever thread runs it, and with
//! however many threads: a run of 1, 2 or N threads writes the same files.
//!
//! Open-loop traffic and partition-aggregate applications on an interval are drawn in
//! every partition, each from its own stream, so that each new flow has the same index
//! everywhere; a flow's sending end lives in its source's partition, its receiving end in
//! its destination's, and its record is put together from both when the run ends. A
//! mechanism's host shims and switch hooks run with their hosts and switches, and its
//! controller in the first partition: control messages to another partition go there as
//! mail, due a channel latency later (which bounds the lookahead too). An incast without an
//! interval begins its next epoch when its requests reach the nearest worker, a flight no
//! shorter than the lookahead (or the run stays in one partition): the aggregator's
//! partition tells every partition (itself too) as mail, due then. What else crosses
//! partitions (flows that return by a fixed delay, captures) keeps the run in one
//! partition, and [`plan`] says why.

use crate::model::{EpKind, Flow, Model, Part};
use crate::output::Recorded;
use crate::packet::MIN_PACKET;
use crate::rules::Forward;
use crate::scenario::Loaded;
use crate::sim::{Outbox, Sim, Split};
use crate::tcp::TcpEndpoint;
use crate::topology::NodeRef;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// At most this many partitions (a k = 32 fat tree has 32 pods, a k = 64 one 64), when
/// asked for: each holds a copy of the world's flows, so more cost memory and pay only
/// with as many cores.
pub const MAX_PARTITIONS: usize = 64;
const _: () = assert!(MAX_PARTITIONS <= 64, "a bit per partition in a u64");

/// Where each node runs, and the lookahead the partitions keep to.
#[derive(Clone, Debug)]
pub struct Partitioning {
    pub count: u16,
    pub of_host: Arc<Vec<u16>>,
    pub of_switch: Arc<Vec<u16>>,
    /// The partition that runs each port: its queue, its transmissions and what it records.
    /// Its sending node's, except a top-tier switch's that forwards by its table alone: its
    /// ports run with the nodes they feed (`plan`).
    pub of_port: Arc<Vec<u16>>,
    /// The least time from a packet's sending on a link between two partitions to its
    /// arrival at the far end: its delay plus the serialization of the smallest packet
    /// (`MIN_PACKET`).
    pub lookahead: u64,
}

/// The partitions of a fabric of at least `SPLIT_FROM_HOSTS` hosts when the scenario does
/// not say: each partition costs a copy of the world and an exchange per window, which more
/// threads must pay for. On 2 cores, web search at 50% load, against one partition: k = 16
/// (1,024 hosts, 0.2 s) 1.63 times as fast with 2 partitions, 1.34 with 4, 1.03 with 8, 0.82
/// with 16 (bench/threads.json); k = 32 (0.05 s) 1.70 with 2, 1.35 with 8, 1.12 with 16.
/// More cores want more (`--partitions`).
pub const DEFAULT_PARTITIONS: usize = 2;
/// Below this many hosts a window holds too few events to pay for the exchange (k = 8, 128
/// hosts: 8 partitions on 2 threads took 1.7 times as long as one).
pub const SPLIT_FROM_HOSTS: usize = 1024;

impl Partitioning {
    /// The partition node `n` runs in.
    pub fn of(&self, n: NodeRef) -> u16 {
        match n {
            NodeRef::Host(h) => self.of_host[h as usize],
            NodeRef::Switch(s) => self.of_switch[s as usize],
        }
    }
}

/// The scenario's partitions (at most `want`; without it, `DEFAULT_PARTITIONS` from
/// `SPLIT_FROM_HOSTS` hosts), or why it runs as one.
pub fn plan(m: &Model, want: Option<usize>) -> Result<Partitioning, String> {
    if m.eps.iter().any(|e| e.return_delay().is_some()) {
        return Err("flows with a return_delay run in one partition".into());
    }
    if m.eps
        .iter()
        .any(|e| matches!(e.kind, EpKind::UdpEcho { .. }))
    {
        return Err("UDP flows that echo count their bytes at both ends, in one partition".into());
    }
    let forwards = |r: &crate::rules::Rule| matches!(r.actions.forward, Forward::Port(_));
    if m.pending_rules.iter().any(|(_, _, r)| forwards(r)) {
        // Such a rule can hand a packet to a host of another partition than its endpoint's.
        return Err("rules that forward to a port run in one partition".into());
    }
    if !m.pcap_ports.is_empty() {
        return Err("captures (output.pcap) are written by one partition".into());
    }
    let (hosts, switches) = (m.hosts.len(), m.graph.switches.len());
    let max = match want {
        Some(n) => n.min(MAX_PARTITIONS),
        None if hosts >= SPLIT_FROM_HOSTS => DEFAULT_PARTITIONS,
        None => 1,
    };
    if max < 2 {
        return Err(match want {
            Some(_) => "one partition was asked for".into(),
            None => format!(
                "{hosts} hosts: a run is split from {SPLIT_FROM_HOSTS} (--partitions sets it)"
            ),
        });
    }
    let node = |n: NodeRef| match n {
        NodeRef::Host(h) => h as usize,
        NodeRef::Switch(s) => hosts + s as usize,
    };
    // Each switch's tier: its distance in links from the nearest host.
    let mut tier = vec![u32::MAX; hosts + switches];
    let mut frontier: Vec<usize> = (0..hosts).collect();
    frontier.iter().for_each(|&h| tier[h] = 0);
    let mut depth = 0;
    while !frontier.is_empty() {
        depth += 1;
        let mut next = Vec::new();
        for l in &m.graph.links {
            for (a, b) in [(node(l.a), node(l.b)), (node(l.b), node(l.a))] {
                if tier[a] == depth - 1 && tier[b] == u32::MAX {
                    tier[b] = depth;
                    next.push(b);
                }
            }
        }
        frontier = next;
    }
    let top = tier[hosts..]
        .iter()
        .copied()
        .filter(|&t| t != u32::MAX)
        .max();
    let Some(top) = top.filter(|&t| t >= 2) else {
        return Err("its switches are one tier".into());
    };
    // What stays joined without the top tier.
    let mut parent: Vec<usize> = (0..hosts + switches).collect();
    fn root(parent: &mut [usize], mut x: usize) -> usize {
        while parent[x] != x {
            parent[x] = parent[parent[x]];
            x = parent[x];
        }
        x
    }
    for l in &m.graph.links {
        let (a, b) = (node(l.a), node(l.b));
        if tier[a] != top && tier[b] != top {
            let (ra, rb) = (root(&mut parent, a), root(&mut parent, b));
            parent[ra.max(rb)] = ra.min(rb);
        }
    }
    let mut component = vec![u16::MAX; hosts + switches];
    let mut roots = Vec::new();
    for n in 0..hosts + switches {
        if tier[n] == top {
            continue;
        }
        let r = root(&mut parent, n);
        let c = match roots.iter().position(|&x| x == r) {
            Some(c) => c,
            None => {
                roots.push(r);
                roots.len() - 1
            }
        };
        component[n] = c as u16;
    }
    let groups = roots.len();
    if groups < 2 {
        return Err("its fabric is joined without its top tier".into());
    }
    let count = groups.min(max);
    // Neighbouring components together, and the top tier dealt out in turn.
    let mut of_node: Vec<u16> = component
        .iter()
        .map(|&c| (c as usize * count / groups) as u16)
        .collect();
    let mut dealt = 0;
    for n in 0..hosts + switches {
        if tier[n] == top {
            of_node[n] = (dealt % count) as u16;
            dealt += 1;
        }
    }
    // A top-tier switch that forwards by its table alone keeps no state but its ports'
    // queues, and a packet is routed through it as it leaves the switch before (`Forward`
    // events): each of its ports runs with the node it feeds. A packet between two pods then
    // crosses once, into its destination's partition, where it would cross twice through a
    // third partition's switch (k = 32 in 2 partitions: 551 M crossings for 570 M packets).
    let plain = m.plain_switches();
    let split = |n: NodeRef| match n {
        NodeRef::Switch(s) => tier[hosts + s as usize] == top && plain[s as usize],
        NodeRef::Host(_) => false,
    };
    let of_port: Vec<u16> = m
        .ports
        .iter()
        .map(|p| match split(p.from) {
            true => of_node[node(p.to())],
            false => of_node[node(p.from)],
        })
        .collect();
    // A link into such a switch leads to its ports' partitions: taken to cross.
    let lookahead = m
        .ports
        .iter()
        .zip(&of_port)
        .filter(|&(p, &from)| split(p.to()) || from != of_node[node(p.to())])
        .map(|(p, _)| p.delay_ns + p.ser(MIN_PACKET))
        .min()
        .unwrap_or(u64::MAX);
    // The controller runs in the first partition: its messages cross too.
    let lookahead = match m.control.app {
        Some(_) => lookahead.min(m.control.latency),
        None => lookahead,
    };
    if lookahead == 0 {
        return Err("a link or the control channel between its partitions takes no time".into());
    }
    // An epoch without an interval begins when its requests reach the nearest worker; every
    // partition must hear of it before.
    let quick = m.apps.iter().find_map(|a| match a {
        crate::model::App::Incast(i) if i.interval.is_none() && i.request_min < lookahead => {
            Some(i)
        }
        _ => None,
    });
    if let Some(i) = quick {
        return Err(format!(
            "partition-aggregate application {:?} without an interval reaches a worker in \
             {} ns, sooner than the {lookahead} ns between its partitions",
            i.name, i.request_min
        ));
    }
    Ok(Partitioning {
        count: count as u16,
        of_host: Arc::new(of_node[..hosts].to_vec()),
        of_switch: Arc::new(of_node[hosts..].to_vec()),
        of_port: Arc::new(of_port),
        lookahead,
    })
}

/// `n` more copies of the world, built on `threads` threads: a k = 32 fat tree takes a
/// quarter of a second to build.
pub fn build_copies(l: &Loaded, seed: u64, n: u16, threads: usize) -> Vec<Model> {
    let threads = threads.clamp(1, (n as usize).max(1));
    let build = || Model::build(l, seed).expect("a scenario built once builds again");
    // Every copy is the same world: which thread built which does not matter.
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let share = (t..n as usize).step_by(threads);
                scope.spawn(move || share.map(|_| build()).collect::<Vec<_>>())
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("a build does not panic"))
            .collect()
    })
}

/// Makes `m` (a copy of the world as built) partition `id`'s: endpoints of other
/// partitions' VMs are left to them, the queues sampled are its own, and its random stream
/// is its own (partition 0 keeps the scenario's).
fn localize(m: &mut Model, parts: &Partitioning, id: u16) {
    m.part = Some(Part {
        id,
        of_host: parts.of_host.clone(),
        of_switch: parts.of_switch.clone(),
    });
    if id > 0 && m.control.app.take().is_some() {
        m.control.elsewhere = true;
    }
    for e in 0..m.eps.len() {
        if !m.vm_is_local(m.eps[e].vm) {
            m.eps[e].kind = EpKind::Elsewhere;
        }
    }
    m.sampled_ports.retain(|&p| parts.of_port[p as usize] == id);
    if id > 0 {
        m.rng = crate::rng::Rng::new(m.seed ^ (id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    }
}

/// How many windows a lookahead spans. Mail sent in a window is due no sooner than a
/// lookahead later, so it is taken `WINDOWS_PER_LOOKAHEAD` windows on: a thread may start a
/// window once every thread has finished the one that many before, and so run ahead of the
/// slowest by the rest of a lookahead.
const WINDOWS_PER_LOOKAHEAD: u64 = 2;
/// Windows' mail, counts and senders are kept in this many sets, reused in turn: a set is
/// read `WINDOWS_PER_LOOKAHEAD` windows after it was written, and no thread can write it
/// again before every thread has read it (see `windows`).
const SETS: u64 = 2 * WINDOWS_PER_LOOKAHEAD;

/// Each thread's windows finished, on a line of its own, and whether a thread panicked (so
/// that the others panic too instead of waiting forever). A thread waits for the others by
/// reading their counts; it spins, then yields: a window of a large fabric is tens of
/// microseconds of work, and sleeping on a futex costs as much again.
struct Finished {
    by_thread: Vec<Count>,
    broken: AtomicBool,
}

#[repr(align(128))] // a line (and its prefetched neighbour) of its own
struct Count(AtomicU64);

impl Finished {
    fn new(threads: usize) -> Finished {
        Finished {
            by_thread: (0..threads).map(|_| Count(AtomicU64::new(0))).collect(),
            broken: AtomicBool::new(false),
        }
    }

    /// Thread `me` has finished `n` windows: whoever sees this sees what it wrote before.
    fn publish(&self, me: usize, n: u64) {
        self.by_thread[me].0.store(n, Ordering::Release);
    }

    /// Waits until every other thread has finished `n` windows; `seen` keeps the counts read
    /// before, so that a count known to be far enough is not read again.
    fn wait(&self, me: usize, n: u64, seen: &mut [u64]) {
        for (t, count) in self.by_thread.iter().enumerate() {
            if t == me {
                continue;
            }
            let mut spins = 0u32;
            while seen[t] < n {
                seen[t] = count.0.load(Ordering::Acquire);
                if seen[t] >= n {
                    break;
                }
                assert!(
                    !self.broken.load(Ordering::Acquire),
                    "another partition's thread panicked"
                );
                if spins < 1 << 12 {
                    std::hint::spin_loop();
                    spins += 1;
                } else {
                    std::thread::yield_now();
                }
            }
        }
    }
}

/// Breaks the others' waits when its thread unwinds from a panic.
struct BreakOnPanic<'a>(&'a Finished);

impl Drop for BreakOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.broken.store(true, Ordering::Release);
        }
    }
}

/// What the partitions share, in `SETS` sets used by windows in turn: the mail between each
/// pair (handed over by the sender after a window, taken by the receiver
/// `WINDOWS_PER_LOOKAHEAD` windows on), which senders left each partition mail (a bit
/// each), each partition's events in the window and the mail it took before it; and each
/// thread's windows finished.
struct Exchange {
    mail: Vec<Mutex<Outbox>>,
    sent_to: Vec<AtomicU64>,
    window_events: Vec<AtomicU64>,
    window_mail: Vec<AtomicU64>,
    finished: Finished,
    count: usize,
}

/// What a partitioned run's windows cost, for the synchronization model (bench/README.md,
/// "Threads"): the events and the mail taken on the critical path were the partitions run
/// on `cores[i]` cores (partition p on core p % cores, one window after another: the sum
/// over the windows of the busiest core's), and the wall time the threads waited for each
/// other.
#[derive(Default)]
pub struct WindowCost {
    pub cores: Vec<usize>,
    pub critical_events: Vec<u64>,
    pub critical_mail: Vec<u64>,
    pub barrier_wait_s: f64,
}

impl WindowCost {
    fn new(count: usize) -> Self {
        let mut cores: Vec<usize> = (0..).map(|i| 1 << i).take_while(|&c| c < count).collect();
        cores.push(count);
        WindowCost {
            critical_events: vec![0; cores.len()],
            critical_mail: vec![0; cores.len()],
            cores,
            barrier_wait_s: 0.0,
        }
    }

    /// Adds a window's counts by partition to `critical`, by cores (`cores`: the powers of
    /// two below the partitions' count, then the count). Done by one thread at the start of
    /// each window, so in one pass and halvings: the loads of 2c cores folded give c's
    /// (partition p on core p % c).
    fn add(cores: &[usize], counts: &[AtomicU64], critical: &mut [u64]) {
        let mut load = [0u64; MAX_PARTITIONS];
        let (&count, powers) = cores.split_last().expect("the partitions' count");
        // The loads of the most cores that halvings reach: the count's own if a power of
        // two (each partition alone), else the largest power below it.
        let widest = match powers.last() {
            Some(&c) if c * 2 == count => count,
            Some(&c) => c,
            None => 1,
        };
        let mut max = 0;
        for (p, n) in counts.iter().enumerate() {
            let n = n.load(Ordering::Relaxed);
            max = max.max(n);
            load[p % widest] += n;
        }
        critical[powers.len()] += max;
        let mut width = widest;
        for (i, &c) in powers.iter().enumerate().rev() {
            while width > c {
                width /= 2;
                for j in 0..width {
                    load[j] += load[j + width];
                }
            }
            critical[i] += load[..c].iter().max().copied().unwrap_or(0);
        }
    }
}

impl Exchange {
    fn new(count: usize, threads: usize) -> Exchange {
        let atomics = |n: usize| (0..n).map(|_| AtomicU64::new(0)).collect();
        let sets = SETS as usize;
        Exchange {
            mail: (0..sets * count * count)
                .map(|_| Mutex::new(Outbox::default()))
                .collect(),
            sent_to: atomics(sets * count),
            window_events: atomics(sets * count),
            window_mail: atomics(sets * count),
            finished: Finished::new(threads),
            count,
        }
    }

    /// The set that window `w`'s mail and counts go to.
    fn set(w: u64) -> usize {
        (w % SETS) as usize
    }

    /// The mail `from` sent `to` in window `w`.
    fn slot(&self, w: u64, from: u16, to: u16) -> &Mutex<Outbox> {
        let pair = from as usize * self.count + to as usize;
        &self.mail[Self::set(w) * self.count * self.count + pair]
    }

    /// The partitions that sent partition `to` mail in window `w`, a bit each.
    fn senders(&self, w: u64, to: u16) -> &AtomicU64 {
        &self.sent_to[Self::set(w) * self.count + to as usize]
    }

    /// Each partition's events in window `w`, and the mail it took before them.
    fn counts(&self, w: u64) -> (&[AtomicU64], &[AtomicU64]) {
        let at = Self::set(w) * self.count..(Self::set(w) + 1) * self.count;
        (&self.window_events[at.clone()], &self.window_mail[at])
    }
}

/// Runs one partitioned world on `threads` threads and puts its results together.
pub fn run(
    models: Vec<Model>,
    parts: &Partitioning,
    threads: usize,
    progress: &mut dyn FnMut(u64, u64),
) -> (Sim, WindowCost) {
    let count = parts.count as usize;
    assert_eq!(models.len(), count);
    let far = Arc::new(
        models[0]
            .ports
            .iter()
            .map(|p| parts.of(p.to()))
            .collect::<Vec<u16>>(),
    );
    let sampled = models[0].sampled_ports.clone();
    let fib = models[0].fib.clone();
    let mut sims: Vec<Sim> = models
        .into_iter()
        .enumerate()
        .map(|(id, mut m)| {
            localize(&mut m, parts, id as u16);
            m.fib = fib.clone();
            let split = Split {
                part: id as u16,
                far: far.clone(),
                of_port: parts.of_port.clone(),
                outbox: (0..count).map(|_| Outbox::default()).collect(),
            };
            Sim::partition(m, Some(Box::new(split)))
        })
        .collect();
    let end = sims[0].m.duration;
    let threads = threads.clamp(1, count);
    let exchange = Exchange::new(count, threads);
    crate::heap::advise();
    // Partition i runs on thread i % threads; the caller's thread is thread 0 and reports
    // progress.
    let mut by_thread: Vec<Vec<&mut Sim>> = (0..threads).map(|_| Vec::new()).collect();
    for (i, s) in sims.iter_mut().enumerate() {
        by_thread[i % threads].push(s);
    }
    let lookahead = parts.lookahead;
    let mut cost = WindowCost::new(count);
    let (windows_run, waited) = std::thread::scope(|scope| {
        let mut mine = by_thread.into_iter();
        let first = mine.next().expect("one thread at least");
        let others: Vec<_> = mine
            .enumerate()
            .map(|(i, group)| {
                let exchange = &exchange;
                scope.spawn(move || {
                    let mut no_progress = |_, _| {};
                    windows(
                        group,
                        i + 1,
                        exchange,
                        lookahead,
                        end,
                        &mut no_progress,
                        None,
                    )
                    .1
                })
            })
            .collect();
        let (n, mine) = windows(
            first,
            0,
            &exchange,
            lookahead,
            end,
            progress,
            Some(&mut cost),
        );
        let theirs: f64 = others
            .into_iter()
            .map(|t| t.join().expect("no thread panicked"))
            .sum();
        (n, mine + theirs)
    });
    cost.barrier_wait_s = waited / threads as f64;
    progress(end, end);
    for s in &mut sims {
        s.finish();
    }
    // What the last windows sent is due after the end.
    let undelivered: usize = exchange
        .mail
        .iter()
        .map(|m| m.lock().expect("no thread panicked").packets())
        .sum();
    let mut whole = merge(sims, parts, sampled, undelivered as u64);
    whole.rec.windows = windows_run;
    (whole, cost)
}

/// One thread's part of the run (thread `me`): its partitions' windows until the end; how
/// many there were and the seconds it waited for the other threads. The thread given `cost`
/// tallies each window's.
///
/// The windows are `lookahead / WINDOWS_PER_LOOKAHEAD` wide from time 0, so mail sent in
/// window w is due no sooner than window w + `WINDOWS_PER_LOOKAHEAD` (w's start plus a
/// lookahead), before which its receiver takes it, in the order of the partitions that sent
/// it and of their sending: what a partition does, and when it takes its mail, are the same
/// whichever thread runs it. A thread starts window w once every thread has finished window
/// w - `WINDOWS_PER_LOOKAHEAD`. Window w's set (`Exchange::set`) is written again in window
/// w + `SETS`, which its writer starts only once every thread has finished window
/// w + `WINDOWS_PER_LOOKAHEAD` and so has taken and tallied what window w left.
fn windows(
    mut sims: Vec<&mut Sim>,
    me: usize,
    x: &Exchange,
    lookahead: u64,
    end: u64,
    progress: &mut dyn FnMut(u64, u64),
    mut cost: Option<&mut WindowCost>,
) -> (u64, f64) {
    let _guard = BreakOnPanic(&x.finished);
    let ahead = WINDOWS_PER_LOOKAHEAD.min(lookahead);
    let width = lookahead / ahead;
    let mut seen = vec![0; x.finished.by_thread.len()];
    let mut waited = std::time::Duration::ZERO;
    let mut reported = 0;
    // Adds window `w`'s counts to the critical path, once every thread has finished it.
    let tally = |cost: &mut WindowCost, w: u64| {
        let (events, mail) = x.counts(w);
        WindowCost::add(&cost.cores, events, &mut cost.critical_events);
        WindowCost::add(&cost.cores, mail, &mut cost.critical_mail);
    };
    let mut w = 0u64;
    loop {
        let start = w.saturating_mul(width);
        if start > end {
            break;
        }
        let last = start.saturating_add(width - 1).min(end);
        if w >= ahead {
            let t = std::time::Instant::now();
            x.finished.wait(me, w - ahead + 1, &mut seen);
            waited += t.elapsed();
            if let Some(c) = cost.as_deref_mut() {
                tally(c, w - ahead);
            }
        }
        let (events, taken) = x.counts(w);
        for s in sims.iter_mut() {
            let part = s.split.as_ref().expect("a partition").part;
            let mut mail = 0;
            if w >= ahead {
                let mut senders = x.senders(w - ahead, part).swap(0, Ordering::Relaxed);
                while senders != 0 {
                    let from = senders.trailing_zeros() as u16;
                    senders &= senders - 1;
                    let slot = x.slot(w - ahead, from, part);
                    let mut slot = slot.lock().expect("no thread panicked");
                    mail += slot.len() as u64;
                    s.receive(&mut slot);
                }
            }
            taken[part as usize].store(mail, Ordering::Relaxed);
            let before = s.rec.events;
            s.run_until(last, &mut |_, _| {});
            events[part as usize].store(s.rec.events - before, Ordering::Relaxed);
            let due = (w + ahead).saturating_mul(width);
            let split = s.split.as_mut().expect("a partition");
            for (to, outbox) in split.outbox.iter_mut().enumerate() {
                if outbox.is_empty() {
                    continue;
                }
                // What makes the windows sound: a broken lookahead would deliver the past.
                assert!(
                    outbox.all_after(due - 1),
                    "a packet crossed within the lookahead"
                );
                let slot = x.slot(w, split.part, to as u16);
                std::mem::swap(&mut *slot.lock().expect("no thread panicked"), outbox);
                x.senders(w, to as u16)
                    .fetch_or(1 << split.part, Ordering::Relaxed);
            }
        }
        w += 1;
        x.finished.publish(me, w);
        if last >= reported + end / 100 {
            reported = last;
            progress(last, end);
        }
    }
    // The last windows' counts, once every thread has finished them.
    if let Some(c) = cost {
        x.finished.wait(me, w, &mut seen);
        for v in w.saturating_sub(ahead)..w {
            tally(c, v);
        }
    }
    (w, waited.as_secs_f64())
}

/// Partition 0's Sim with every partition's share of the world and of the records: each
/// port from the partition that ran it, each switch's flow table and hook from the
/// switch's, each host's shim and each endpoint from its host's, each flow's
/// receiving side (delivered bytes, completion) from its destination's and its stop from
/// its source's; counts summed, queue samples in time and then the scenario's port order
/// (`sampled`).
fn merge(mut sims: Vec<Sim>, parts: &Partitioning, sampled: Vec<u32>, undelivered: u64) -> Sim {
    let mut rest: Vec<Sim> = sims.drain(1..).collect();
    let mut whole = sims.pop().expect("partition 0");
    let (of_host, of_switch) = (&parts.of_host, &parts.of_switch);
    let host_part = |m: &Model, vm: u32| of_host[m.vms[vm as usize].host as usize] as usize;
    for i in 0..whole.m.ports.len() {
        let owner = parts.of_port[i] as usize;
        if owner != 0 {
            std::mem::swap(&mut whole.m.ports[i], &mut rest[owner - 1].m.ports[i]);
        }
    }
    for h in 0..whole.m.shims.len() {
        let owner = of_host[h] as usize;
        if owner != 0 {
            std::mem::swap(&mut whole.m.shims[h], &mut rest[owner - 1].m.shims[h]);
        }
    }
    for s in &rest {
        for (&kind, &(n, bytes)) in &s.m.control.messages {
            let e = whole.m.control.messages.entry(kind).or_default();
            (e.0, e.1) = (e.0 + n, e.1 + bytes);
        }
    }
    for sw in 0..whole.m.tables.len() {
        let owner = of_switch[sw] as usize;
        if owner != 0 {
            std::mem::swap(&mut whole.m.tables[sw], &mut rest[owner - 1].m.tables[sw]);
            let (a, b) = (
                &mut whole.m.switch_mech[sw],
                &mut rest[owner - 1].m.switch_mech[sw],
            );
            std::mem::swap(a, b);
        }
    }
    let mut closed: Vec<Vec<Option<TcpEndpoint>>> = rest
        .iter_mut()
        .map(|s| {
            std::mem::take(&mut s.m.closed)
                .into_iter()
                .map(Some)
                .collect()
        })
        .collect();
    for e in 0..whole.m.eps.len() {
        let owner = host_part(&whole.m, whole.m.eps[e].vm);
        if owner == 0 {
            continue;
        }
        let kind = std::mem::replace(&mut rest[owner - 1].m.eps[e].kind, EpKind::Elsewhere);
        whole.m.eps[e].kind = match kind {
            EpKind::TcpClosed(i) => {
                let t = closed[owner - 1][i as usize].take();
                EpKind::Tcp(Box::new(t.expect("each closed endpoint once")))
            }
            kind => kind,
        };
    }
    for f in 0..whole.m.flows.len() {
        let (src, dst) = (whole.m.flows[f].src_vm, whole.m.flows[f].dst_vm);
        let (tx, rx) = (host_part(&whole.m, src), host_part(&whole.m, dst));
        if rx != 0 {
            std::mem::swap(&mut whole.m.flows[f], &mut rest[rx - 1].m.flows[f]);
        }
        if tx == rx {
            continue;
        }
        let sender: &Flow = match tx {
            0 => &rest[rx - 1].m.flows[f],
            t => &rest[t - 1].m.flows[f],
        };
        let (stopped, stop_end, iss) = (sender.stopped, sender.end, sender.iss);
        let flow = &mut whole.m.flows[f];
        flow.iss = iss;
        if stopped {
            // Ended by its stop if that came first, as in a run of one partition.
            if stop_end.is_some_and(|s| flow.end.is_none_or(|e| s <= e)) {
                flow.end = stop_end;
                flow.completed = false;
            }
            flow.stopped = true;
        }
    }
    let mut rec = std::mem::take(&mut whole.rec);
    for s in &mut rest {
        add(&mut rec, std::mem::take(&mut s.rec));
    }
    rec.in_flight += undelivered;
    let order: std::collections::HashMap<u32, usize> =
        sampled.iter().enumerate().map(|(i, &p)| (p, i)).collect();
    rec.queue_samples
        .sort_by_key(|&(t, p, _, _)| (t, order[&p]));
    rec.packet_ins.sort_by_key(|&(t, sw, _, _)| (t, sw));
    // A host's VMs are numbered after the hosts before it: by address is by host.
    rec.rate_samples.sort_by_key(|&(t, vm, _, _)| (t, vm));
    whole.m.sampled_ports = sampled;
    whole.rec = rec;
    whole
}

/// Adds one partition's records to the run's.
fn add(to: &mut Recorded, from: Recorded) {
    to.events += from.events;
    to.cons.sent += from.cons.sent;
    to.cons.delivered += from.cons.delivered;
    to.cons.dropped += from.cons.dropped;
    to.in_flight += from.in_flight;
    to.shim_dropped += from.shim_dropped;
    to.rule_dropped += from.rule_dropped;
    to.vnic_dropped += from.vnic_dropped;
    to.queue_samples.extend(from.queue_samples);
    to.packet_ins.extend(from.packet_ins);
    to.rate_samples.extend(from.rate_samples);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The critical path by cores against a direct sum, partition p on core p % cores.
    #[test]
    fn the_busiest_core_of_each_core_count() {
        for counts in [
            vec![3u64, 1, 4, 1, 5, 9],
            vec![2, 7, 1, 8, 2, 8, 1, 8],
            vec![5, 3],
        ] {
            let cost = WindowCost::new(counts.len());
            let atomics: Vec<AtomicU64> = counts.iter().map(|&n| AtomicU64::new(n)).collect();
            let mut critical = vec![0; cost.cores.len()];
            WindowCost::add(&cost.cores, &atomics, &mut critical);
            let direct: Vec<u64> = cost
                .cores
                .iter()
                .map(|&c| {
                    (0..c)
                        .map(|j| counts.iter().skip(j).step_by(c).sum::<u64>())
                        .max()
                        .unwrap()
                })
                .collect();
            assert_eq!(critical, direct, "{counts:?} on {:?} cores", cost.cores);
        }
        // Six partitions: [3, 1, 4, 1, 5, 9] on 1, 2, 4 and 6 cores.
        assert_eq!(WindowCost::new(6).cores, vec![1, 2, 4, 6]);
    }

    /// A thread that has waited for `n` finished windows sees everything the others did
    /// before finishing them, and no other is more than a window further, for thread counts
    /// that are powers of two and not.
    #[test]
    fn a_thread_that_waited_sees_what_every_other_did_before() {
        const WINDOWS: u64 = 300;
        for threads in 1..=6 {
            let finished = Finished::new(threads);
            let done = AtomicU64::new(0);
            std::thread::scope(|scope| {
                for me in 0..threads {
                    let (finished, done) = (&finished, &done);
                    scope.spawn(move || {
                        let _guard = BreakOnPanic(finished); // a failure fails them all
                        let mut seen = vec![0; threads];
                        for w in 1..=WINDOWS {
                            done.fetch_add(1, Ordering::Relaxed);
                            finished.publish(me, w);
                            finished.wait(me, w, &mut seen);
                            let n = threads as u64;
                            let all = done.load(Ordering::Relaxed);
                            assert!((n * w..=n * (w + 1)).contains(&all), "{all} at {w}");
                        }
                    });
                }
            });
        }
    }

    /// A thread that panics takes the others down with it instead of leaving them waiting.
    #[test]
    fn a_panicking_thread_breaks_the_others_waits() {
        let finished = Finished::new(3);
        let failed = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..3)
                .map(|me| {
                    let finished = &finished;
                    scope.spawn(move || {
                        let _guard = BreakOnPanic(finished);
                        let mut seen = vec![0; 3];
                        for w in 1..10 {
                            assert!(!(me == 1 && w == 5), "thread 1 fails");
                            finished.publish(me, w);
                            finished.wait(me, w, &mut seen);
                        }
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join())
                .filter(Result::is_err)
                .count()
        });
        assert_eq!(failed, 3);
    }
}
