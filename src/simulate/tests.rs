//! The simulator's tests.

use super::*;

#[test]
fn the_same_seed_gives_the_same_figures() {
    let trace = generate_trace(3, 2, 2, 60);
    let scenario = Scenario::default();
    let first = simulate_icepack(&trace, &scenario);
    let second = simulate_icepack(&trace, &scenario);
    assert_eq!(
        (first.runs, first.failed_runs, first.bytes_rewritten),
        (second.runs, second.failed_runs, second.bytes_rewritten)
    );
    assert!(first.runs > 0);
}

#[test]
fn icepack_starts_no_empty_run_and_forgets_nothing() {
    let trace = generate_trace(11, 3, 3, 40);
    let scenario = Scenario::default();
    let icepack = simulate_icepack(&trace, &scenario);
    let reference = simulate_reference(&trace, &scenario);
    assert_eq!(icepack.empty_runs, 0);
    // Every file is either compacted (a latency recorded) or still pending at the end.
    assert!(icepack.latency_p50_minutes.is_some());
    assert!(reference.runs > 0);
    let svg = render_svg(&[icepack, reference]);
    assert!(svg.starts_with("<svg") && svg.contains("polyline"));
}

#[test]
fn traces_read_from_csv_with_indices_or_names() {
    let trace = read_trace("# seconds,table,size\n60,0,1000,dt=1\n0,1,2000\n").unwrap();
    assert_eq!(
        trace.arrivals[0],
        Arrival {
            at_millis: 0,
            table: 1,
            size: 2000,
            partition: String::new()
        }
    );
    assert_eq!(trace.arrivals[1].partition, "dt=1");
    assert_eq!(trace.tables, ["t0", "t1"]);
    assert!(read_trace("x,0,1").unwrap_err().contains("line 1"));

    let named = read_trace("0,orders,10\n5,events,20,day=1\n9,orders,30\n").unwrap();
    assert_eq!(named.tables, ["orders", "events"]);
    let tables: Vec<usize> = named.arrivals.iter().map(|arrival| arrival.table).collect();
    assert_eq!(tables, [0, 1, 0]);
    assert_eq!(named.bytes(), 60);
    let error = read_trace("0,orders,10\n1,or ders,1\n").unwrap_err();
    assert!(
        error.contains("line 2") && error.contains("or ders"),
        "{error}"
    );
    assert!(read_trace("0,orders,-1\n")
        .unwrap_err()
        .contains("negative"));
}

#[test]
fn compute_and_write_amplification_follow_the_run_cost_model() {
    let trace = generate_trace(5, 2, 1, 120);
    let mut scenario = Scenario {
        failure_rate: 0.0,
        ..Scenario::default()
    };
    let report = simulate_reference(&trace, &scenario);
    assert_eq!(report.bytes_ingested, trace.bytes());
    let gib = |bytes: u64| bytes as f64 / (1024.0 * MIB as f64);
    // Every run costs the base; a reference run takes everything counted, at least what it
    // rewrote.
    assert!(report.compute_seconds >= report.runs as f64 * 90.0);
    assert!(
        report.compute_seconds
            >= report.runs as f64 * 90.0 + gib(report.bytes_rewritten) * 60.0 - 1.0
    );
    assert!(
        (report.write_amplification - gib(report.bytes_rewritten) / gib(trace.bytes())).abs()
            < 1e-9
    );
    assert_eq!(
        report.compute_series.last().map(|(_, seconds)| *seconds),
        Some(report.compute_seconds)
    );
    // A warm engine: the fixed cost per run is one second instead of 90.
    scenario.run_base_millis = 1_000;
    let warm = simulate_reference(&trace, &scenario);
    assert!(warm.compute_seconds < report.compute_seconds);
}

#[test]
fn the_mixed_trace_has_its_five_writers() {
    let trace = generate_mixed_trace(1, 1);
    assert_eq!(
        trace.tables,
        ["streaming", "microbatch", "etl", "cdc", "quiet"]
    );
    let count = |table: usize| trace.arrivals.iter().filter(|a| a.table == table).count();
    assert_eq!(count(0), 1440, "one file a minute");
    assert_eq!(count(1), 8 * 288, "eight writers every five minutes");
    assert!((24 * 40..=24 * 120).contains(&count(2)), "{}", count(2));
    assert_eq!(count(3), 720);
    assert!(trace
        .arrivals
        .windows(2)
        .all(|w| w[0].at_millis <= w[1].at_millis));
    // Late CDC data lands in earlier days' partitions (from the second day on).
    let two_days = generate_mixed_trace(1, 3);
    assert!(two_days
        .arrivals
        .iter()
        .any(|a| a.table == 3 && a.partition != format!("dt={}", a.at_millis / (24 * HOUR))));
}
