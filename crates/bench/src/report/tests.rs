use super::*;
use serde_json::json;

pub(crate) fn point(
    protocol: &str,
    pi: usize,
    variant: usize,
    clients: u32,
    tps: f64,
) -> PointResult {
    let mut params = Map::new();
    params.insert("rows".into(), json!(10 * (variant + 1)));
    PointResult {
        protocol: protocol.into(),
        clients,
        throughput_tps: tps,
        latency_us_p50: 10,
        latency_us_p99: 20,
        aborts: 1,
        retries: 1,
        per_procedure: BTreeMap::new(),
        params,
        latency_us_p95: 15,
        latency_us_max: 30,
        latency_us_mean: 11.0,
        commits: 100,
        cc_aborts: 1,
        user_aborts: 0,
        gave_up: 0,
        aborts_by_cause: BTreeMap::new(),
        statements_per_s: 5.0,
        lock_waits: 0,
        lock_waits_by_table: BTreeMap::new(),
        pipelining_waits: BTreeMap::new(),
        protocol_counters: BTreeMap::new(),
        lock_wait_us_mean: 0.0,
        queue_bypasses: 0,
        searches_cut: 0,
        detector_breaks: 0,
        link_delay_us_measured: 100.0,
        link_messages: 10,
        measured_s: 1.0,
        warmup_s: 0.0,
        isolation: "serializable".into(),
        deadlock: "wait-die".into(),
        topology: "t".into(),
        peak: false,
        throughput_ratio_vs_baseline: None,
        baseline: None,
        round: 1,
        workload_metrics: Map::new(),
        check: "not run".into(),
        variant,
        protocol_index: pi,
        durability: "none".into(),
        wal: None,
        cpu: None,
        data: "loaded".into(),
        faults: None,
    }
}

#[test]
fn peaks_and_ratios() {
    let results = vec![
        point("acid", 0, 0, 1, 100.0),
        point("acid", 0, 0, 8, 400.0),
        point("acid", 0, 0, 64, 300.0),
        point("fast", 1, 0, 1, 100.0),
        point("fast", 1, 0, 8, 800.0),
        point("fast", 1, 0, 64, 1200.0),
    ];
    let rep = BenchReport::new("micro", Map::new(), results);
    let peaks: Vec<(String, u32)> = rep
        .peak
        .iter()
        .map(|p| (p.protocol.clone(), p.clients))
        .collect();
    assert_eq!(peaks, vec![("acid".into(), 8), ("fast".into(), 64)]);
    assert_eq!(rep.ratios.get("fast/acid"), Some(&3.0));
    assert_eq!(rep.ratios.len(), 1);
    assert_eq!(rep.results[5].throughput_ratio_vs_baseline, Some(4.0));
    assert!(rep.results[1].peak && !rep.results[0].peak);
}

#[test]
fn a_baseline_of_several_series_is_their_best_at_each_client_count() {
    // Per series, its throughput at 8 and at 64 clients.
    let series = [
        ("acid@wait-die", 400.0, 300.0),
        ("acid@detect", 200.0, 500.0),
        ("salt", 800.0, 1000.0),
        ("raw", 1000.0, 2000.0),
    ];
    let results: Vec<PointResult> = series
        .iter()
        .enumerate()
        .flat_map(|(pi, &(name, at8, at64))| {
            [point(name, pi, 0, 8, at8), point(name, pi, 0, 64, at64)]
        })
        .collect();
    let rep = BenchReport::with_baseline("micro", Map::new(), results, 2);
    // Each point against the better variant at its client count.
    let salt: Vec<(Option<f64>, Option<&str>)> = rep.results[4..6]
        .iter()
        .map(|r| (r.throughput_ratio_vs_baseline, r.baseline.as_deref()))
        .collect();
    assert_eq!(
        salt,
        vec![
            (Some(2.0), Some("acid@wait-die")),
            (Some(2.0), Some("acid@detect"))
        ]
    );
    assert_eq!(rep.results[0].throughput_ratio_vs_baseline, Some(1.0));
    assert_eq!(rep.results[2].throughput_ratio_vs_baseline, Some(0.5));
    // Peak against the best peak, under the protocol's own name; the
    // variants get no ratio of their own.
    assert_eq!(rep.ratios.get("salt/acid"), Some(&2.0));
    assert_eq!(rep.ratios.get("raw/acid"), Some(&4.0));
    assert_eq!(rep.ratios.len(), 2);
    let b = rep.baseline.as_ref().expect("a best-of baseline");
    assert_eq!(b.of, vec!["acid@wait-die", "acid@detect"]);
    let chosen: Vec<(u32, &str)> = b
        .chosen
        .iter()
        .map(|p| (p.clients, p.protocol.as_str()))
        .collect();
    assert_eq!(chosen, vec![(8, "acid@wait-die"), (64, "acid@detect")]);
    assert_eq!(b.peak[0].protocol, "acid@detect");
    assert_eq!(rep.raw_share.get("salt"), Some(&0.5));
    assert_eq!(rep.raw_share.get("acid@wait-die"), Some(&0.2));
    assert!(!rep.raw_share.contains_key("raw"));
    let summary = rep.render_summary();
    assert!(
        summary.contains("best of acid@wait-die, acid@detect"),
        "{summary}"
    );
    assert!(summary.contains("share of raw's peak"), "{summary}");
    // One series: no best-of report, the first is the baseline.
    let mut rest = rep.results[4..8].to_vec();
    for r in &mut rest {
        r.protocol_index -= 2;
    }
    let single = BenchReport::new("micro", Map::new(), rest);
    assert!(single.baseline.is_none());
    assert_eq!(single.results[2].baseline.as_deref(), Some("salt"));
}

#[test]
fn rounds_count_with_their_median() {
    let at = |name: &str, pi: usize, clients: u32, round: u32, tps: f64| {
        let mut p = point(name, pi, 0, clients, tps);
        p.round = round;
        p
    };
    // Per client count, each round's throughput of acid and of fast.
    // One slow round makes 64 clients fast's best single point, not its
    // best median.
    let rounds = [
        (8, [100.0, 300.0, 200.0], [400.0, 300.0, 1000.0]),
        (64, [150.0, 150.0, 150.0], [1200.0, 350.0, 350.0]),
    ];
    let mut results = Vec::new();
    for (clients, acid, fast) in rounds {
        for (i, (a, f)) in acid.into_iter().zip(fast).enumerate() {
            results.push(at("acid", 0, clients, i as u32 + 1, a));
            results.push(at("fast", 1, clients, i as u32 + 1, f));
        }
    }
    let rep = BenchReport::new("micro", Map::new(), results);
    let peaks: Vec<(String, u32, f64)> = rep
        .peak
        .iter()
        .map(|p| (p.protocol.clone(), p.clients, p.throughput_tps))
        .collect();
    assert_eq!(
        peaks,
        vec![("acid".into(), 8, 200.0), ("fast".into(), 8, 400.0)]
    );
    assert_eq!(rep.ratios.get("fast/acid"), Some(&2.0));
    // Per round, peak against peak: 1200/150, 350/300, 1000/200.
    assert_eq!(
        rep.round_ratios.get("fast/acid"),
        Some(&vec![8.0, 1.167, 5.0])
    );
    // A point's own ratio is against the baseline of its round.
    assert_eq!(rep.results[5].throughput_ratio_vs_baseline, Some(5.0));
    assert!(rep
        .results
        .iter()
        .filter(|r| r.peak)
        .all(|r| r.clients == 8));
    let text = rep.render_summary();
    assert!(text.contains("round 3"), "{text}");
    assert!(text.contains("-- each point over 3 rounds --"), "{text}");
    assert!(
        text.contains("per round (peak against peak) = 8.00x, 1.17x, 5.00x"),
        "{text}"
    );
    let single = BenchReport::new("micro", Map::new(), vec![point("acid", 0, 0, 8, 1.0)]);
    assert!(single.round_ratios.is_empty());
    assert!(!single.to_json().unwrap().contains("round_ratios"));
}

#[test]
fn variant_ratios_and_no_compare() {
    let rep = BenchReport::new(
        "micro",
        Map::new(),
        vec![
            point("acid", 0, 0, 4, 100.0),
            point("acid", 0, 1, 4, 200.0),
            point("x", 1, 0, 4, 300.0),
            point("x", 1, 1, 4, 200.0),
        ],
    );
    assert_eq!(rep.ratios.get("x/acid"), Some(&1.5));
    assert_eq!(rep.ratios.get("x/acid@rows=10"), Some(&3.0));
    assert_eq!(rep.ratios.get("x/acid@rows=20"), Some(&1.0));

    let single = BenchReport::new("micro", Map::new(), vec![point("acid", 0, 0, 4, 100.0)]);
    assert!(single.ratios.is_empty());
    assert_eq!(single.results[0].throughput_ratio_vs_baseline, None);
}

#[test]
fn json_has_contract_keys() -> Result<(), serde_json::Error> {
    let rep = BenchReport::new("micro", Map::new(), vec![point("acid", 0, 0, 4, 100.0)]);
    let v: Json = serde_json::from_str(&rep.to_json()?)?;
    for k in ["workload", "config", "results", "ratios"] {
        assert!(v.get(k).is_some(), "missing {k}");
    }
    let r = &v["results"][0];
    for k in CONTRACT_RESULT_KEYS.iter().chain(&["rows"]) {
        assert!(r.get(k).is_some(), "missing result key {k}");
    }
    assert!(r.get("variant").is_none());
    Ok(())
}

#[test]
fn tables_render() {
    let rep = BenchReport::new("micro", Map::new(), vec![point("acid", 0, 0, 4, 100.0)]);
    let t = render_point("micro", &rep.results[0]);
    assert!(t.contains("topology: t"));
    assert!(t.contains("(all)"));
    assert!(!t.contains("lock waits by table"), "no waits, no line: {t}");
    let mut p = rep.results[0].clone();
    for (table, waits) in [("quiet", 2), ("hot", 30)] {
        let w = TableWaits {
            waits,
            wait_us_mean: 12.5,
        };
        p.lock_waits_by_table.insert(table.into(), w);
    }
    assert!(!render_point("micro", &p).contains("pipelining waits"));
    p.pipelining_waits.extend(
        [("rank", 4, 400), ("commit", 9, 90)]
            .map(|(k, n, us)| (k.to_string(), TableWaits::of(n, us).expect("waits"))),
    );
    assert!(TableWaits::of(0, 0).is_none(), "no waits, no entry");
    let t = render_point("micro", &p);
    assert!(
        t.contains("lock waits by table: hot 30 (mean 12 us), quiet 2 (mean 12 us)"),
        "{t}"
    );
    assert!(
        t.contains("pipelining waits: commit 9 (mean 10 us), rank 4 (mean 100 us)"),
        "{t}"
    );
    let s = rep.render_summary();
    assert!(s.contains("<- peak"), "{s}");
}
