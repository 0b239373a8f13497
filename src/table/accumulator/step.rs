//! What a table's accumulator does next, decided from the table's state and the time alone:
//! which run to ask the pool for, in which order the kinds of runs go, and when to look again.
//! The actor only carries it out (`table::actor`), so the order is tested here, without
//! actors or a pool.
//!
//! The order: a compaction that is due goes first; with none due, a read of the table's
//! metadata (a periodic reconcile, or the read that confirms or drops unconfirmed files), then a
//! run for the delete files, `rewrite_manifests`, the statistics, and `remove_orphan_files` on its
//! schedule. A table backed off after a failure asks for nothing but a read (which rewrites
//! nothing) until its back-off is over.

use super::*;

/// The accumulator's next step: at most one run to ask for, and when to look again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NextStep {
    /// A run other than a compaction to ask for now, with no compaction due (its trigger). The
    /// pool starts it when the table's turn comes, whatever the thresholds (a forced request).
    pub maintenance: Option<Trigger>,
    /// The compaction that is due, to ask for now (the table may start a run).
    pub compaction: Option<DueReason>,
    /// When to look again if the step asks for nothing (or the pool cannot be asked): the end of
    /// a back-off, a max-wait deadline, the next scheduled read or orphan run.
    pub wake_at: Option<UnixMillis>,
}

impl Accumulator {
    /// The table's next step at `now`; `started_millis` is when its periodic reconcile counts
    /// from if the table was never read. A table with a claim (a run in flight) asks for
    /// nothing and needs no timer: the run's end decides again.
    pub fn next_step(&self, now: UnixMillis, started_millis: UnixMillis) -> NextStep {
        let mut step = NextStep {
            maintenance: None,
            compaction: None,
            wake_at: None,
        };
        if self.claim().is_some() {
            return step;
        }
        let due = self.due(now);
        let may_start = self.may_start_run(now);
        // A periodic reconcile, when its time has come and no run is due; or one that confirms
        // (or drops) the files a read did not find in the table, once their grace is over.
        let periodic = self.spec.reconcile_every_millis.map(|every| {
            let state = &self.snapshot.state;
            state
                .last_truth_millis
                .unwrap_or(started_millis)
                .saturating_add(every)
        });
        let reconcile_at = [periodic, self.unconfirmed_read_at()]
            .into_iter()
            .flatten()
            .min();
        // With no compaction due: a run for the table's delete files, else `rewrite_manifests`
        // when it has too many manifests, else its statistics after a run that changed it.
        let maintenance = if self.deletes_due() {
            Some(Trigger::Deletes)
        } else if self.manifests_due() {
            Some(Trigger::RewriteManifests)
        } else if self.statistics_due() {
            Some(Trigger::ComputeStatistics)
        } else {
            None
        }
        .filter(|_| due.is_none());
        // `remove_orphan_files` on its schedule, when nothing else is due.
        let orphans_at = self.next_orphan_run();
        let orphans_now =
            due.is_none() && maintenance.is_none() && orphans_at.is_some_and(|at| at <= now);
        step.maintenance = if due.is_none() && reconcile_at.is_some_and(|at| now >= at) {
            Some(Trigger::Reconcile)
        } else if maintenance.is_some() && may_start {
            maintenance
        } else if orphans_now && may_start {
            Some(Trigger::RemoveOrphans)
        } else {
            None
        };
        step.compaction = due.filter(|_| may_start);
        let wake_at = match due {
            None if maintenance.is_some() => self.next_attempt(),
            None if orphans_now => self.next_attempt(),
            Some(_) if may_start => None,
            Some(_) => self.next_attempt(),
            None => self.next_deadline(now),
        };
        step.wake_at = [
            wake_at,
            reconcile_at.filter(|_| due.is_none()),
            orphans_at.filter(|at| *at > now),
        ]
        .into_iter()
        .flatten()
        .min();
        step
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;
    use proptest::prelude::*;

    const HOUR: i64 = 3_600_000;

    /// A table in one of many states: files pending (due at 3), backed off or not, delete files,
    /// manifests and statistics due or not, orphans and reconciles on their schedules or not,
    /// files unconfirmed or not.
    #[derive(Debug, Clone)]
    struct Case {
        pending: u8,
        backed_off: Option<bool>,
        deletes: u64,
        manifests: u64,
        statistics_due: bool,
        orphans_last_run: Option<Option<i64>>,
        reconcile_last_read: Option<Option<i64>>,
        unconfirmed_since: Option<i64>,
        now: i64,
    }

    fn case() -> impl Strategy<Value = Case> {
        (
            (
                0u8..5,
                proptest::option::of(any::<bool>()),
                0u64..5,
                0u64..8,
            ),
            (
                any::<bool>(),
                proptest::option::of(proptest::option::of(0i64..100)),
                proptest::option::of(proptest::option::of(0i64..100)),
                proptest::option::of(0i64..100),
                50i64..150,
            ),
        )
            .prop_map(
                |(
                    (pending, backed_off, deletes, manifests),
                    (statistics_due, orphans_last_run, reconcile_last_read, unconfirmed_since, now),
                )| Case {
                    pending,
                    backed_off,
                    deletes,
                    manifests,
                    statistics_due,
                    orphans_last_run: orphans_last_run.map(|last| last.map(|hours| hours * HOUR)),
                    reconcile_last_read: reconcile_last_read
                        .map(|last| last.map(|hours| hours * HOUR)),
                    unconfirmed_since: unconfirmed_since.map(|hours| hours * HOUR),
                    now: now * HOUR,
                },
            )
    }

    /// The accumulator of a case: its table (100-byte small files, due at 3 files) with every
    /// schedule the case turns on.
    fn accumulator(case: &Case) -> Accumulator {
        let mut spec = TableSpec::for_tests(
            "n.t",
            "b",
            "t/",
            crate::table::policy::Thresholds {
                small_file_bytes: 100,
                min_files: 3,
                min_total_bytes: 1_000,
                max_wait_millis: Some(2 * HOUR),
            },
        );
        spec.deletes = crate::config::DeleteThresholds {
            files: Some(3),
            ratio_ppm: None,
        };
        spec.max_manifests = Some(5);
        spec.compute_statistics = true;
        spec.remove_orphans_every_millis = case.orphans_last_run.map(|_| 24 * HOUR);
        spec.reconcile_every_millis = case.reconcile_last_read.map(|_| 6 * HOUR);
        let store = MemoryStore::new();
        let mut accumulator = Accumulator::load(Arc::new(spec), &store).unwrap();
        let candidates: Vec<Candidate> = (0..case.pending)
            .map(|n| Candidate {
                bucket: "b".to_string(),
                key: format!("t/data/{n}.parquet"),
                size: 10,
                event_millis: case.now - HOUR,
                partition: String::new(),
                kind: Default::default(),
            })
            .collect();
        let mut staged = accumulator.stage(candidates, &store, case.now).unwrap();
        let committed = store.commit(std::mem::take(&mut staged.ops)).is_ok();
        accumulator.settle(committed);
        let state = &mut accumulator.snapshot.state;
        state.next_attempt_millis = case
            .backed_off
            .map(|running| case.now + if running { HOUR } else { -HOUR });
        state.deletes.position_files = case.deletes;
        state.manifests.known = case.manifests;
        state.statistics_due = case.statistics_due;
        state.orphans.last_run_millis = case.orphans_last_run.flatten();
        state.last_truth_millis = case.reconcile_last_read.flatten();
        if let Some(since) = case.unconfirmed_since {
            state.unconfirmed.files = 1;
            state.unconfirmed.oldest_event_millis = Some(since);
        }
        accumulator
    }

    proptest! {
        /// The order of a table's runs, whatever its state: a compaction due goes first and is
        /// asked for only when the table may start a run; a read of the metadata comes before any
        /// maintenance and is the only run a backed-off table asks for; deletes, manifests,
        /// statistics and orphans follow in that order, orphans never before their time; and a
        /// step that asks for nothing looks again in the future, never in the past (no busy
        /// loop), and no later than the end of a back-off that holds a run back.
        #[test]
        fn runs_go_in_their_order_and_a_quiet_step_always_wakes_later(case in case()) {
            let accumulator = accumulator(&case);
            let now = case.now;
            let step = accumulator.next_step(now, 0);
            let due = accumulator.due(now);
            let may_start = accumulator.may_start_run(now);
            prop_assert!(step.maintenance.is_none() || step.compaction.is_none());
            prop_assert_eq!(step.compaction, due.filter(|_| may_start));
            if due.is_some() {
                prop_assert_eq!(step.maintenance, None);
            }
            if !may_start {
                prop_assert!(matches!(step.maintenance, None | Some(Trigger::Reconcile)));
            }
            let rank = |trigger: Trigger| {
                [
                    Trigger::Reconcile,
                    Trigger::Deletes,
                    Trigger::RewriteManifests,
                    Trigger::ComputeStatistics,
                    Trigger::RemoveOrphans,
                ]
                .iter()
                .position(|known| *known == trigger)
                .unwrap()
            };
            let waiting = [
                accumulator.deletes_due(),
                accumulator.manifests_due(),
                accumulator.statistics_due(),
                accumulator.next_orphan_run().is_some_and(|at| at <= now),
            ];
            if let Some(trigger) = step.maintenance {
                let rank = rank(trigger);
                if rank > 0 {
                    // Nothing of a higher rank was waiting.
                    prop_assert!(!waiting[..rank - 1].iter().any(|waits| *waits));
                }
                if trigger == Trigger::RemoveOrphans {
                    prop_assert!(accumulator.next_orphan_run() <= Some(now));
                }
            }
            if due.is_none() && may_start && waiting.iter().any(|waits| *waits) {
                prop_assert!(step.maintenance.is_some(), "something waits: {step:?}");
            }
            if step.maintenance.is_none() && step.compaction.is_none() {
                prop_assert!(step.wake_at.is_none_or(|at| at > now), "{step:?}");
                let held_back = due.is_some() || waiting.iter().any(|waits| *waits);
                if held_back && !may_start {
                    let next = accumulator.next_attempt().unwrap();
                    prop_assert!(step.wake_at.is_some_and(|at| at <= next), "{step:?}");
                }
            }
        }
    }

    /// A run in flight: nothing is asked, no timer (the run's end decides again).
    #[test]
    fn a_table_with_a_run_in_flight_asks_for_nothing() {
        let case = Case {
            pending: 4,
            backed_off: None,
            deletes: 0,
            manifests: 0,
            statistics_due: false,
            orphans_last_run: None,
            reconcile_last_read: None,
            unconfirmed_since: None,
            now: 100 * HOUR,
        };
        let mut accumulator = accumulator(&case);
        assert!(accumulator.next_step(case.now, 0).compaction.is_some());
        let store = MemoryStore::new();
        let (ops, _) = accumulator
            .begin_claim("r-1", Trigger::Files, case.now, false)
            .unwrap();
        store.commit(ops).unwrap();
        accumulator.settle(true);
        assert_eq!(
            accumulator.next_step(case.now, 0),
            NextStep {
                maintenance: None,
                compaction: None,
                wake_at: None
            }
        );
    }
}
