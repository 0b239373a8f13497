use super::*;
use crate::base::clock::FakeClock;
use crate::config::Config;
use crate::model::report::{FailureClass, ReportSummary};
use crate::model::task::{Rewrite, Task};
use proptest::prelude::*;

const NOW: UnixMillis = 1_714_564_800_000;

/// Tables `t0`..`t{n}` of tenant `a`, except those listed for `b`.
fn map_of(tables: usize, of_b: &[usize]) -> Arc<TableMap<()>> {
    // Tenants may use every slot a test gives the pool.
    let mut text =
        "[spark]\nmax_concurrent = 8\n[tenants.a]\n[tenants.b]\nweight = 3\n".to_string();
    for table in 0..tables {
        let tenant = if of_b.contains(&table) { "b" } else { "a" };
        text.push_str(&format!(
            "[[tables]]\ntable = \"n.t{table}\"\nbucket = \"lake\"\nprefix = \"t{table}/\"\ntenant = \"{tenant}\"\n"
        ));
    }
    let config = Config::from_toml_str(&text).unwrap();
    let specs: Vec<_> = config.table_specs().into_iter().map(Arc::new).collect();
    let slots = vec![(); specs.len()];
    Arc::new(TableMap::new(specs, slots, config.tenant_specs()))
}

fn core(slots: usize, map: Arc<TableMap<()>>) -> PoolCore<()> {
    let mut core = PoolCore::new(slots, Arc::new(FakeClock::new(NOW)), true);
    core.set_map(map);
    core
}

fn ticket(run_id: &str, trigger: Trigger) -> ClaimTicket {
    ClaimTicket {
        run_id: run_id.to_string(),
        trigger,
        started_millis: NOW - 1_000,
        files: 3,
        bytes: 30,
        spec: None,
        task: Task::Rewrite(Rewrite {
            min_input_files: 3,
            ..Rewrite::whole_table()
        }),
        nonce: String::new(),
        upto_seq: 0,
        last_failure: None,
    }
}

fn success() -> RunOutcome {
    RunOutcome::Success {
        report: ReportSummary::default(),
        duration_millis: 2_000,
        attempts: 1,
    }
}

fn failure() -> RunOutcome {
    RunOutcome::Failure {
        class: FailureClass::Timeout,
        excerpt: "timed out".to_string(),
        duration_millis: 4_000,
        attempts: 1,
    }
}

/// The `(table, run id, trigger, force)` of each start among the effects.
fn starts(effects: &[Effect]) -> Vec<(TableIndex, String, Trigger, bool)> {
    effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::Start {
                table,
                run_id,
                trigger,
                force,
            } => Some((*table, run_id.clone(), *trigger, *force)),
            _ => None,
        })
        .collect()
}

fn only_start(effects: &[Effect]) -> (TableIndex, String, Trigger, bool) {
    let mut found = starts(effects);
    assert_eq!(found.len(), 1, "{effects:?}");
    found.remove(0)
}

#[test]
fn requests_are_idempotent_while_waiting_or_running() {
    let mut core = core(1, map_of(2, &[]));
    let (table, run_id, trigger, force) = only_start(&core.request(0, Trigger::Files, false));
    assert_eq!((table, trigger, force), (0, Trigger::Files, false));
    assert!(
        core.request(0, Trigger::Files, false).is_empty(),
        "its run holds the slot: asking again changes nothing"
    );
    assert!(
        starts(&core.request(1, Trigger::Bytes, false)).is_empty(),
        "one slot"
    );
    assert!(starts(&core.request(1, Trigger::Bytes, false)).is_empty());
    assert_eq!(core.status().waiting, [1], "asked twice, waits once");

    let (_, effects) = core.finish(0, &ticket(&run_id, Trigger::Files), success(), true);
    assert_eq!(
        effects[0],
        Effect::Deliver {
            table: 0,
            run_id: run_id.clone(),
            outcome: success()
        },
        "the outcome goes to the accumulator before anything starts"
    );
    assert_eq!(
        only_start(&effects).0,
        1,
        "the waiting table takes the slot"
    );
    assert!(core.status().waiting.is_empty());
    assert!(
        starts(&core.request(0, Trigger::Files, false)).is_empty(),
        "its run ended: it may ask again, and waits for the one slot"
    );
    assert_eq!(core.status().waiting, [0]);
}

#[test]
fn a_forced_request_makes_the_waiting_run_forced() {
    let mut core = core(1, map_of(2, &[]));
    let (_, first, ..) = only_start(&core.request(0, Trigger::Files, false));
    core.request(1, Trigger::Files, false);
    core.request(1, Trigger::RewriteManifests, true);
    core.request(1, Trigger::Bytes, false);
    let (_, effects) = core.finish(0, &ticket(&first, Trigger::Files), success(), true);
    let (table, _, trigger, force) = only_start(&effects);
    assert_eq!(
        (table, trigger, force),
        (1, Trigger::RewriteManifests, true)
    );
}

#[test]
fn what_comes_before_the_map_waits_for_it_recoveries_first() {
    let mut core = PoolCore::new(2, Arc::new(FakeClock::new(NOW)), true);
    assert!(core.request(0, Trigger::Files, false).is_empty());
    assert!(core.request(1, Trigger::Files, false).is_empty());
    assert!(core.recover(0, ticket("old", Trigger::Files)).is_empty());
    let effects = core.set_map(map_of(2, &[]));
    assert_eq!(
        effects[0],
        Effect::Recover {
            table: 0,
            ticket: ticket("old", Trigger::Files)
        }
    );
    let (table, ..) = only_start(&effects);
    assert_eq!(
        table, 1,
        "table 0's run is the recovered one: not started again"
    );
    assert_eq!(core.running_run(0), Some("old"));
}

#[test]
fn a_table_added_by_a_reload_is_served_once_the_new_map_comes() {
    let mut core = core(2, map_of(1, &[]));
    assert!(
        core.request(1, Trigger::Files, false).is_empty(),
        "its accumulator started before the pool had the new map"
    );
    let (table, ..) = only_start(&core.set_map(map_of(2, &[])));
    assert_eq!(table, 1);
}

#[test]
fn a_recovered_run_takes_the_table_out_of_the_line() {
    let mut core = core(1, map_of(2, &[]));
    let (_, first, ..) = only_start(&core.request(0, Trigger::Files, false));
    core.request(1, Trigger::Files, false);
    // A claim of table 1 reported failed reached the store: its run is recovered.
    assert_eq!(
        core.recover(1, ticket("found", Trigger::Files)),
        [Effect::Recover {
            table: 1,
            ticket: ticket("found", Trigger::Files)
        }]
    );
    assert!(core.status().waiting.is_empty());
    let (_, effects) = core.finish(0, &ticket(&first, Trigger::Files), success(), true);
    assert!(starts(&effects).is_empty(), "table 1 is not started twice");
    let (_, effects) = core.finish(1, &ticket("found", Trigger::Files), success(), true);
    assert!(effects.contains(&Effect::Idle));
}

#[test]
fn a_start_lost_with_its_accumulator_is_started_again() {
    let mut core = core(1, map_of(1, &[]));
    let (_, lost, ..) = only_start(&core.request(0, Trigger::Files, false));
    // The new accumulator asked before the pool heard of the restart: ignored (slot held).
    assert!(core.request(0, Trigger::Files, false).is_empty());
    let effects = core.accumulator_restarted(0, None);
    let (table, again, trigger, _) = only_start(&effects);
    assert_eq!((table, trigger), (0, Trigger::Files));
    assert_ne!(again, lost, "a new run");
    // A late `NotClaimed` of the lost start frees nothing of the new run's.
    assert!(starts(&core.not_claimed(0, &lost)).is_empty());
    assert_eq!(core.running_run(0), Some(again.as_str()));
}

#[test]
fn a_restart_that_loaded_the_claim_keeps_the_run() {
    let mut core = core(1, map_of(1, &[]));
    let (_, run_id, ..) = only_start(&core.request(0, Trigger::Files, false));
    assert!(core.accumulator_restarted(0, Some(&run_id)).is_empty());
    assert_eq!(core.running_run(0), Some(run_id.as_str()));
    assert!(
        core.recover(0, ticket(&run_id, Trigger::Files)).is_empty(),
        "the restarted accumulator reporting the pool's own run: nothing to recover"
    );
}

#[test]
fn an_outcome_waits_for_the_restarted_accumulator() {
    let mut core = core(1, map_of(1, &[]));
    let (_, run_id, ..) = only_start(&core.request(0, Trigger::Files, false));
    let (started, effects) = core.finish(0, &ticket(&run_id, Trigger::Files), failure(), false);
    assert_eq!(started, NOW, "the slot's start");
    assert!(!effects
        .iter()
        .any(|effect| matches!(effect, Effect::Deliver { .. })));
    let effects = core.accumulator_restarted(0, Some(&run_id));
    assert_eq!(
        effects,
        [Effect::Deliver {
            table: 0,
            run_id: run_id.clone(),
            outcome: failure()
        }]
    );
    assert!(
        core.recover(0, ticket(&run_id, Trigger::Files)).is_empty(),
        "the handed-over run is not recovered as well"
    );
    let status = core.status();
    assert_eq!(status.recent_failures.len(), 1);
    assert_eq!(status.recent_failures[0].class, "timeout");
    assert_eq!(status.median_run_millis, Some(4_000));
}

#[test]
fn a_manual_run_is_answered_after_the_accumulator_hears_its_end() {
    let mut core = core(1, map_of(2, &[]));
    assert_eq!(
        core.compact_now(5, Trigger::Manual),
        Err("the table is not configured".to_string())
    );
    let (table, run_id, trigger, force) =
        only_start(&core.compact_now(0, Trigger::Manual).unwrap());
    assert_eq!((table, trigger, force), (0, Trigger::Manual, true));
    assert_eq!(
        core.compact_now(0, Trigger::Manual),
        Err("the table has a run in flight already".to_string())
    );
    let (_, effects) = core.finish(0, &ticket(&run_id, Trigger::Manual), success(), true);
    assert!(matches!(effects[0], Effect::Deliver { .. }));
    match &effects[1] {
        Effect::Answer {
            table: 0,
            answer: Ok(result),
        } => {
            assert_eq!(
                (result.table.as_str(), result.run_id.as_str()),
                ("n.t0", run_id.as_str())
            );
            assert_eq!(result.claimed_files, 3);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(effects.last(), Some(&Effect::Idle));
}

#[test]
fn a_manual_run_that_claims_nothing_is_answered() {
    let mut core = core(1, map_of(1, &[]));
    let (_, run_id, ..) = only_start(&core.compact_now(0, Trigger::Manual).unwrap());
    let effects = core.not_claimed(0, &run_id);
    assert!(matches!(
        &effects[0],
        Effect::Answer {
            table: 0,
            answer: Err(_)
        }
    ));
    assert!(core.running_run(0).is_none());
}

#[test]
fn a_reload_moves_a_waiting_table_and_drops_a_removed_one() {
    let mut core = core(1, map_of(3, &[]));
    only_start(&core.request(0, Trigger::Files, false));
    core.request(1, Trigger::Files, false);
    core.compact_now(2, Trigger::Manual).unwrap();
    assert_eq!(core.status().waiting, [1, 2]);
    // Table 2 moves to tenant b (weight 3): it goes first.
    let moved = map_of(3, &[2]);
    core.set_map(moved.clone());
    assert_eq!(core.status().waiting, [2, 1]);
    // Table 2 leaves the configuration: out of the line, its manual waiter told why.
    let config = Config::from_toml_str(
        "[spark]\nmax_concurrent = 8\n[tenants.a]\n[tenants.b]\nweight = 3\n[[tables]]\ntable = \"n.t0\"\nbucket = \"lake\"\nprefix = \"t0/\"\ntenant = \"a\"\n[[tables]]\ntable = \"n.t1\"\nbucket = \"lake\"\nprefix = \"t1/\"\ntenant = \"a\"\n",
    )
    .unwrap();
    let specs = config.table_specs();
    let changes = crate::table::map::plan_changes(&moved, specs);
    let without = Arc::new(moved.apply(&changes, Vec::new(), config.tenant_specs()));
    let effects = core.set_map(without);
    assert_eq!(
        effects,
        [Effect::Answer {
            table: 2,
            answer: Err("the table was removed from the configuration".to_string())
        }]
    );
    assert_eq!(core.status().waiting, [1]);
    assert!(
        core.request(2, Trigger::Files, false).is_empty(),
        "removed: not queued"
    );
    assert_eq!(core.status().waiting, [1]);
}

#[test]
fn stopping_leaves_what_waits_and_is_idle_once_runs_end() {
    let mut core = core(1, map_of(2, &[]));
    let (_, run_id, ..) = only_start(&core.request(0, Trigger::Files, false));
    core.request(1, Trigger::Files, false);
    assert!(
        !core.stop_dispatching().contains(&Effect::Idle),
        "a run is in flight"
    );
    let (_, effects) = core.finish(0, &ticket(&run_id, Trigger::Files), success(), true);
    assert!(starts(&effects).is_empty(), "nothing starts while stopping");
    assert_eq!(effects.last(), Some(&Effect::Idle));
    assert!(core.is_idle());
}

#[test]
fn more_slots_start_what_waits() {
    let mut core = core(1, map_of(3, &[]));
    core.request(0, Trigger::Files, false);
    core.request(1, Trigger::Files, false);
    core.request(2, Trigger::Files, false);
    let effects = core.set_max_concurrent(3);
    assert_eq!(
        starts(&effects).iter().map(|s| s.0).collect::<Vec<_>>(),
        [1, 2]
    );
}

/// One event of the pool's life, as the actors produce them in any order.
#[derive(Debug, Clone)]
enum Event {
    Request(TableIndex, bool),
    /// The accumulator of the table answers its oldest unanswered start: claimed or not.
    Answer(TableIndex, bool),
    /// The oldest claimed run of the table ends.
    End(TableIndex, bool),
    Restart(TableIndex),
    Slots(usize),
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        4 => (0..4usize, any::<bool>()).prop_map(|(t, f)| Event::Request(t, f)),
        3 => (0..4usize, any::<bool>()).prop_map(|(t, c)| Event::Answer(t, c)),
        3 => (0..4usize, any::<bool>()).prop_map(|(t, s)| Event::End(t, s)),
        1 => (0..4usize).prop_map(Event::Restart),
        1 => (1..4usize).prop_map(Event::Slots),
    ]
}

proptest! {
    /// Whatever the order of events: no start beyond the slots, one run a table, and a table
    /// that asked is started before the pool goes idle (no request forgotten).
    #[test]
    fn no_request_is_forgotten(events in proptest::collection::vec(event(), 1..80)) {
        let mut core = core(2, map_of(4, &[0, 1]));
        let mut slots = 2;
        // Per table: starts not answered yet, claimed runs in flight.
        let mut unanswered: HashMap<TableIndex, VecDeque<String>> = HashMap::new();
        let mut claimed: HashMap<TableIndex, VecDeque<String>> = HashMap::new();
        // Tables that asked and have not been started since.
        let mut asked: HashSet<TableIndex> = HashSet::new();
        let apply = |effects: Vec<Effect>,
                         unanswered: &mut HashMap<TableIndex, VecDeque<String>>,
                         asked: &mut HashSet<TableIndex>| {
            for (table, run_id, ..) in starts(&effects) {
                asked.remove(&table);
                unanswered.entry(table).or_default().push_back(run_id);
            }
        };
        for event in events {
            let effects = match event {
                Event::Request(table, force) => {
                    if core.running_run(table).is_none() {
                        asked.insert(table);
                    }
                    core.request(table, Trigger::Files, force)
                }
                Event::Answer(table, claim) => {
                    let Some(run_id) = unanswered.entry(table).or_default().pop_front() else {
                        continue;
                    };
                    if claim {
                        claimed.entry(table).or_default().push_back(run_id);
                        Vec::new()
                    } else {
                        core.not_claimed(table, &run_id)
                    }
                }
                Event::End(table, ok) => {
                    let Some(run_id) = claimed.entry(table).or_default().pop_front() else {
                        continue;
                    };
                    let outcome = if ok { success() } else { failure() };
                    core.finish(table, &ticket(&run_id, Trigger::Files), outcome, true).1
                }
                Event::Restart(table) => {
                    // The new accumulator loaded the claim of its latest claimed run, if any;
                    // a start it never answered is lost with the old one. The new one asks at
                    // once, and in the worst order the pool hears that before the restart
                    // (and ignores it: the lost start holds the slot).
                    let lost = unanswered.remove(&table).is_some_and(|runs| !runs.is_empty());
                    let loaded = claimed.get(&table).and_then(|runs| runs.back().cloned());
                    if lost && loaded.is_none() {
                        asked.insert(table);
                        let ignored = core.request(table, Trigger::Files, false);
                        prop_assert!(starts(&ignored).is_empty());
                    }
                    core.accumulator_restarted(table, loaded.as_deref())
                }
                Event::Slots(n) => {
                    slots = n;
                    core.set_max_concurrent(n)
                }
            };
            let started = !starts(&effects).is_empty();
            apply(effects, &mut unanswered, &mut asked);
            let status = core.status();
            let tables: HashSet<_> = status.running.iter().map(|(t, ..)| *t).collect();
            prop_assert_eq!(tables.len(), status.running.len(), "one run a table");
            if started {
                prop_assert!(status.running.len() <= slots, "a start beyond the slots");
            }
        }
        // Drain: every start is claimed and every run ends, until nothing is left.
        for _ in 0..100 {
            let mut effects = Vec::new();
            for (table, runs) in unanswered.iter_mut() {
                for run_id in runs.drain(..) {
                    claimed.entry(*table).or_default().push_back(run_id);
                }
            }
            for (table, runs) in claimed.iter_mut() {
                for run_id in runs.drain(..) {
                    effects.extend(core.finish(*table, &ticket(&run_id, Trigger::Files), success(), true).1);
                }
            }
            if effects.is_empty() {
                break;
            }
            apply(effects, &mut unanswered, &mut asked);
        }
        prop_assert!(asked.is_empty(), "asked and never started: {:?}", asked);
        prop_assert!(core.is_idle());
    }
}

#[test]
fn never_more_runs_than_slots() {
    let mut core = core(2, map_of(4, &[0, 1]));
    for table in 0..4 {
        core.request(table, Trigger::Files, false);
    }
    assert_eq!(core.status().running.len(), 2);
    core.set_max_concurrent(1);
    assert_eq!(core.status().running.len(), 2, "runs in flight go on");
    let run = core.running_run(0).unwrap().to_string();
    let (_, effects) = core.finish(0, &ticket(&run, Trigger::Files), success(), true);
    assert!(starts(&effects).is_empty(), "one slot now, still taken");
}

#[test]
fn queue_estimates_spread_the_line_over_the_slots() {
    let mut pool = PoolStatus {
        running: vec![(7, "r1".to_string(), 0), (8, "r2".to_string(), 0)],
        waiting: vec![3, 1, 2],
        slots: 2,
        median_run_millis: None,
        recent_failures: Vec::new(),
    };
    let estimates = pool.queue_estimates();
    assert_eq!(estimates[&3], (0, None), "no run ended yet: no estimate");
    assert_eq!(estimates.get(&7), None, "running tables do not wait");
    pool.median_run_millis = Some(10_000);
    let estimates = pool.queue_estimates();
    // Both slots busy: the first two wait one run, the third two.
    assert_eq!(estimates[&3], (0, Some(10_000)));
    assert_eq!(estimates[&1], (1, Some(10_000)));
    assert_eq!(estimates[&2], (2, Some(20_000)));
    pool.running.pop();
    assert_eq!(pool.queue_estimates()[&3], (0, Some(0)), "a free slot");
}
