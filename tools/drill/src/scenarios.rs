//! The failure matrix: each scenario builds its topology in a [`Lab`],
//! lets it settle, causes its failures (stamped with what the checker
//! should expect of them) and lets the bus recover; the checker then
//! judges every terminal's tape. Adding a scenario is one function and
//! one entry in [`SCENARIOS`].

use std::time::Duration;

use pricewire::client::SeqStatus;
use pricewire::model::price_flags::STALE;

use crate::check::Bounds;
use crate::lab::Lab;
use crate::nats::NODES;

/// One scenario of the matrix.
pub struct Scenario {
    /// Its name on the command line.
    pub name: &'static str,
    /// What it does, in one line.
    pub about: &'static str,
    /// It runs in the short form (`cargo test`).
    pub short: bool,
    /// It needs the NATS cluster.
    pub bus: bool,
    /// Builds, breaks and watches; returns the time bounds to judge by.
    pub run: fn(&mut Lab) -> anyhow::Result<Bounds>,
}

const S: u64 = 1_000_000_000;

/// The bounds of a takeover with the shipped defaults: a standby takes
/// over after three missed 500-ms heartbeats; terminals see the dead
/// leader's prices replaced (or stale) and new live ones within 5 s.
const TAKEOVER: Bounds = Bounds {
    stale_ns: Some(3 * S),
    resume_ns: Some(5 * S),
};

/// Every scenario, in the order `--scenario all` runs them.
pub const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "leader-killed",
        about: "two cores started together; the leader is killed (SIGKILL)",
        short: true,
        bus: true,
        run: leader_killed,
    },
    Scenario {
        name: "leader-killed-late-standby",
        about:
            "a standby started 60 s after the leader (its engine far behind); the leader is killed",
        short: false,
        bus: true,
        run: late_standby,
    },
    Scenario {
        name: "leader-stopped",
        about: "the leader is frozen (SIGSTOP) for three lease periods, then woken",
        short: false,
        bus: true,
        run: leader_stopped,
    },
    Scenario {
        name: "lease-stream-leader-killed",
        about: "the NATS node leading the lease bucket's stream is killed, then restored",
        short: false,
        bus: true,
        run: lease_node_killed,
    },
    Scenario {
        name: "jetstream-election",
        about: "the platform, not pricewire: how long an R3 stream's writes stop when its leader node is killed",
        short: false,
        bus: true,
        run: jetstream_election,
    },
    Scenario {
        name: "two-nodes-killed",
        about: "two of three NATS nodes are killed (no quorum), then restored",
        short: false,
        bus: true,
        run: two_nodes_killed,
    },
    Scenario {
        name: "leader-feeds-cut",
        about: "the leader's only provider is cut",
        short: false,
        bus: true,
        run: feeds_cut,
    },
    Scenario {
        name: "lease-bucket-deleted",
        about: "the lease bucket's stream is deleted under the cores",
        short: true,
        bus: true,
        run: bucket_deleted,
    },
    Scenario {
        name: "edge-killed",
        about: "an edge is killed; a terminal fails over to another",
        short: false,
        bus: true,
        run: edge_killed,
    },
    Scenario {
        name: "edge-after-takeover",
        about: "a new edge starts after a takeover",
        short: false,
        bus: true,
        run: edge_after_takeover,
    },
    Scenario {
        name: "edge-after-cores-died",
        about: "every core dies; a new edge starts",
        short: true,
        bus: true,
        run: edge_after_cores_died,
    },
    Scenario {
        name: "standalone-restarted",
        about: "a standalone server is restarted under a connected terminal",
        short: true,
        bus: false,
        run: standalone_restarted,
    },
];

/// Two cores, `edges` edges, a leader, and every terminal priced.
fn pair(lab: &mut Lab, edges: usize) -> anyhow::Result<usize> {
    lab.start_core()?;
    lab.start_core()?;
    for _ in 0..edges {
        lab.start_edge()?;
    }
    let leader = lab.await_leader("a leader")?;
    lab.wait_for("every terminal priced", Lab::terminals_priced)?;
    lab.watch(4);
    Ok(leader)
}

fn standby_of(lab: &Lab, leader: usize) -> usize {
    (0..lab.cores.len()).find(|&i| i != leader).unwrap_or(0)
}

fn leader_killed(lab: &mut Lab) -> anyhow::Result<Bounds> {
    let leader = pair(lab, 2)?;
    let standby = standby_of(lab, leader);
    lab.kill_core(leader);
    lab.failure("leader killed", true, true, true);
    lab.wait_for("the standby leads", |l| l.leader() == Some(standby))?;
    lab.watch(6);
    Ok(TAKEOVER)
}

fn late_standby(lab: &mut Lab) -> anyhow::Result<Bounds> {
    lab.start_core()?;
    lab.start_edge()?;
    lab.start_edge()?;
    lab.await_leader("a leader")?;
    lab.watch(60);
    let standby = lab.start_core()?;
    lab.wait_for("a warm standby", |l| {
        l.core_metric(
            standby,
            r#"pricewire_bus_messages_total{event="standby_discarded"}"#,
        ) > 0.0
    })?;
    lab.watch(3);
    lab.kill_core(0);
    lab.failure("leader killed", true, true, true);
    lab.wait_for("the late standby leads", |l| l.leader() == Some(standby))?;
    lab.watch(6);
    Ok(TAKEOVER)
}

fn published(lab: &Lab, i: usize) -> f64 {
    lab.core_metric(i, r#"pricewire_bus_messages_total{event="published"}"#)
}

fn leader_stopped(lab: &mut Lab) -> anyhow::Result<Bounds> {
    let leader = pair(lab, 2)?;
    let standby = standby_of(lab, leader);
    let frozen = published(lab, leader);
    lab.signal_core(leader, libc::SIGSTOP);
    lab.failure("leader frozen (SIGSTOP)", true, true, true);
    lab.wait_for("the standby leads", |l| l.leader() == Some(standby))?;
    // Three lease periods of the default 15-s lease.
    std::thread::sleep(Duration::from_secs(45));
    lab.signal_core(leader, libc::SIGCONT);
    lab.note("old leader woken (SIGCONT)");
    let woken = published(lab, leader);
    lab.watch(5);
    let after = published(lab, leader);
    let leads = lab.core_metric(leader, "pricewire_bus_leader");
    lab.expect(
        "the woken leader publishes nothing",
        after == woken && leads == 0.0 && lab.leader() == Some(standby),
        format!("published {frozen} frozen, {woken} woken, {after} later; leader gauge {leads}"),
    );
    Ok(TAKEOVER)
}

fn lease_node_killed(lab: &mut Lab) -> anyhow::Result<Bounds> {
    let leader = pair(lab, 3)?;
    let lost = |l: &Lab| {
        l.core_metric(
            leader,
            r#"pricewire_bus_messages_total{event="lease_lost"}"#,
        )
    };
    let lost0 = lost(lab);
    let stream = format!("KV_{}_LEASE", crate::lab::PREFIX.to_uppercase());
    let cluster = lab.cluster.as_mut().expect("a bus scenario");
    let node = cluster.stream_leader(&stream)?.unwrap_or(0);
    cluster.kill(node);
    lab.failure(
        &format!("node n{node} (leading {stream}) killed"),
        false,
        true,
        false,
    );
    lab.watch(15);
    lab.cluster.as_mut().expect("cluster").restore(node)?;
    lab.note(format!("node n{node} restored"));
    lab.watch(5);
    let (now, lost1) = (lab.leader(), lost(lab));
    lab.expect(
        "the leader keeps its lease through the election",
        now == Some(leader) && lost1 == lost0,
        format!("leader {now:?} (was {leader}), lease_lost {lost0} -> {lost1}"),
    );
    Ok(Bounds {
        stale_ns: None,
        resume_ns: Some(5 * S),
    })
}

/// Kills the node leading a lease-shaped R3 stream, six times, and
/// measures how long writes to it stop (the stream-leader election the
/// lease's timing must outlast, `bus::lease::LeaseTiming`).
fn jetstream_election(lab: &mut Lab) -> anyhow::Result<Bounds> {
    const STREAM: &str = "KV_DRILL_PROBE";
    const SUBJECT: &str = "$KV.DRILL_PROBE.k";
    let rounds = if lab.short() { 2 } else { 6 };
    let cluster = lab.cluster.as_mut().expect("a bus scenario");
    cluster.create_stream(STREAM, "$KV.DRILL_PROBE.>", 15)?;
    let mut gaps = Vec::new();
    for _ in 0..rounds {
        let cluster = lab.cluster.as_mut().expect("cluster");
        while !cluster.write(SUBJECT, Duration::from_millis(250)) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let node = cluster.stream_leader(STREAM)?.unwrap_or(0);
        let killed = std::time::Instant::now();
        cluster.kill(node);
        while !cluster.write(SUBJECT, Duration::from_millis(250)) {
            if killed.elapsed() > Duration::from_secs(60) {
                anyhow::bail!("writes did not resume within 60 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let gap = killed.elapsed();
        gaps.push(gap.as_millis() as u64);
        lab.note(format!(
            "n{node} (leading {STREAM}) killed: writes back after {} ms",
            gap.as_millis()
        ));
        lab.cluster.as_mut().expect("cluster").restore(node)?;
        std::thread::sleep(Duration::from_secs(3));
    }
    let tolerated = pricewire::bus::lease::LeaseTiming::new(
        pricewire::bus::LEASE_MS_DEFAULT,
        pricewire::bus::heartbeat::HEARTBEAT_MS_DEFAULT,
    )
    .outage_tolerated_ns()
        / 1_000_000;
    let worst = gaps.iter().copied().max().unwrap_or(0);
    lab.expect(
        "every election shorter than the default lease tolerates",
        worst < tolerated,
        format!("writes stopped {gaps:?} ms, tolerated {tolerated} ms"),
    );
    lab.note(format!(
        "write gaps {gaps:?} ms; the default lease tolerates {tolerated} ms"
    ));
    Ok(Bounds::default())
}

fn two_nodes_killed(lab: &mut Lab) -> anyhow::Result<Bounds> {
    pair(lab, 2)?;
    let cluster = lab.cluster.as_mut().expect("a bus scenario");
    cluster.kill(1);
    cluster.kill(2);
    lab.note("nodes n1 and n2 killed: no quorum");
    // The leader's key cannot be renewed: it fences a tenth of the lease
    // before its key could expire (at most 13.5 s), then no core leads.
    std::thread::sleep(Duration::from_millis(13_500));
    lab.failure("the leader fenced (no quorum)", true, false, false);
    lab.watch(8);
    // Stamped before the restart: a leader may come back before both
    // nodes report healthy.
    lab.failure("nodes n1 and n2 restored", false, true, true);
    let cluster = lab.cluster.as_mut().expect("cluster");
    for i in 1..NODES {
        cluster.restore(i)?;
    }
    // JetStream elects the lease stream's leader again (up to ~10 s).
    lab.await_leader("a leader again")?;
    lab.watch(8);
    Ok(Bounds {
        stale_ns: Some(3 * S),
        resume_ns: Some(20 * S),
    })
}

fn feeds_cut(lab: &mut Lab) -> anyhow::Result<Bounds> {
    let leader = pair(lab, 2)?;
    let standby = standby_of(lab, leader);
    lab.cut_feed(leader);
    lab.failure("the leader's provider cut", true, true, true);
    lab.wait_for("the standby leads", |l| l.leader() == Some(standby))?;
    lab.watch(6);
    let resigned = lab.core_metric(
        leader,
        r#"pricewire_bus_messages_total{event="lease_resigned"}"#,
    );
    lab.expect(
        "the leader without feeds handed the lease on",
        resigned >= 1.0,
        format!("lease_resigned {resigned}"),
    );
    // Stale by the engine's max quote age (2 s) and a margin; live again
    // after the leader's 1-s hold and the standby's takeover.
    Ok(Bounds {
        stale_ns: Some(3_500_000_000),
        resume_ns: Some(6 * S),
    })
}

fn bucket_deleted(lab: &mut Lab) -> anyhow::Result<Bounds> {
    pair(lab, 2)?;
    let stream = format!("KV_{}_LEASE", crate::lab::PREFIX.to_uppercase());
    lab.cluster
        .as_ref()
        .expect("a bus scenario")
        .delete_stream(&stream)?;
    lab.failure(&format!("{stream} deleted"), false, true, true);
    lab.wait_for("the bucket created again", |l| {
        (0..l.cores.len()).any(|i| {
            l.core_metric(
                i,
                r#"pricewire_bus_messages_total{event="lease_bucket_recreated"}"#,
            ) > 0.0
        })
    })?;
    lab.await_leader("a leader again")?;
    lab.watch(6);
    let lost: f64 = (0..lab.cores.len())
        .map(|i| lab.core_metric(i, r#"pricewire_bus_messages_total{event="lease_lost"}"#))
        .sum();
    lab.expect(
        "the loss is counted (lease_lost)",
        lost >= 1.0,
        format!("lease_lost {lost}"),
    );
    Ok(TAKEOVER)
}

fn edge_killed(lab: &mut Lab) -> anyhow::Result<Bounds> {
    lab.start_core()?;
    lab.start_core()?;
    for _ in 0..3 {
        lab.start_edge()?;
    }
    lab.start_terminal("failover-terminal", &[0, 1]);
    lab.await_leader("a leader")?;
    lab.wait_for("every terminal priced", Lab::terminals_priced)?;
    lab.watch(4);
    lab.kill_server(0, true);
    lab.failure("edge-0 killed", false, true, false);
    lab.watch(8);
    let t = lab.terminals();
    let term = t
        .iter()
        .find(|t| t.name == "failover-terminal")
        .expect("terminal");
    let logons = term
        .sessions
        .iter()
        .filter(|s| s.what.starts_with("logon"))
        .count();
    lab.expect(
        "the terminal came back on another edge",
        logons >= 2,
        format!("{logons} logons"),
    );
    Ok(Bounds {
        stale_ns: None,
        resume_ns: Some(5 * S),
    })
}

fn edge_after_takeover(lab: &mut Lab) -> anyhow::Result<Bounds> {
    let leader = pair(lab, 1)?;
    let standby = standby_of(lab, leader);
    lab.kill_core(leader);
    lab.failure("leader killed", true, true, true);
    lab.wait_for("the standby leads", |l| l.leader() == Some(standby))?;
    lab.watch(2);
    lab.start_edge()?;
    lab.wait_for("the new edge's terminal priced", Lab::terminals_priced)?;
    lab.watch(4);
    Ok(TAKEOVER)
}

fn edge_after_cores_died(lab: &mut Lab) -> anyhow::Result<Bounds> {
    pair(lab, 1)?;
    for i in 0..lab.cores.len() {
        lab.kill_core(i);
    }
    lab.failure("every core killed", true, false, false);
    lab.watch(2);
    let k = lab.start_edge()?;
    lab.wait_for("the new edge's terminal priced", Lab::terminals_priced)?;
    lab.watch(1);
    let name = lab.server_name(k).to_string();
    let t = lab.terminals();
    let tape = t.iter().find(|t| t.name == name).expect("new terminal");
    let fresh: Vec<u16> = lab
        .symbol_ids()
        .iter()
        .copied()
        .filter(|s| {
            tape.records
                .iter()
                .find(|r| r.symbol == *s)
                .is_some_and(|r| r.flags & STALE == 0)
        })
        .collect();
    lab.expect(
        "a new edge with no live core shows every price stale from its first snapshot",
        fresh.is_empty(),
        format!("symbols first shown fresh: {fresh:?}"),
    );
    Ok(Bounds {
        stale_ns: Some(3 * S),
        resume_ns: None,
    })
}

fn standalone_restarted(lab: &mut Lab) -> anyhow::Result<Bounds> {
    let k = lab.start_standalone()?;
    lab.wait_for("the terminal priced", Lab::terminals_priced)?;
    lab.watch(3);
    let cut = lab.now_ns();
    lab.restart_server(k)?;
    lab.failure("standalone restarted", true, true, false);
    lab.wait_for("the terminal logged on again", |l| {
        l.terminals()[0]
            .sessions
            .iter()
            .filter(|s| s.what.starts_with("logon"))
            .count()
            >= 2
    })?;
    lab.watch(4);
    let t = lab.terminals();
    let tape = &t[0];
    let first_stream = tape.records.first().map(|r| r.stream);
    let after: Vec<_> = lab
        .symbol_ids()
        .iter()
        .filter_map(|s| {
            tape.records
                .iter()
                .find(|r| r.symbol == *s && r.at_ns > cut)
        })
        .collect();
    let resumed = after
        .iter()
        .filter(|r| r.status == SeqStatus::Resumed)
        .count();
    let same_stream = after
        .iter()
        .filter(|r| Some(r.stream) == first_stream)
        .count();
    lab.expect(
        "the restarted server is a resync of a new stream, never a resume",
        resumed == 0 && same_stream == 0 && after.len() == lab.symbol_ids().len(),
        format!(
            "{resumed} resumed, {same_stream} of the old stream, {} symbols",
            after.len()
        ),
    );
    Ok(Bounds {
        stale_ns: None,
        resume_ns: None,
    })
}
