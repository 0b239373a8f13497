//! Claims: the run a claim would start now ([`Accumulator::begin_claim`], and the same without
//! claiming anything for `icepack plan`: [`Accumulator::preview`]), and the claim itself, every
//! pending file moved into it and staged for the store.

use super::*;

impl Accumulator {
    /// Moves every pending file into a claim for a new run and stages that change. `None` when a
    /// run is already in flight, or nothing is pending and the run is not forced. A run that is
    /// not forced is the compaction the thresholds make due (its trigger is theirs, whatever
    /// `trigger` says); a forced one is what `trigger` asks for: a maintenance task, the deletes'
    /// run, a reconcile, or a manual compaction of whatever can be.
    pub fn begin_claim(
        &mut self,
        run_id: &str,
        trigger: Trigger,
        now: UnixMillis,
        force: bool,
    ) -> Option<(Vec<Op>, ClaimTicket)> {
        let plan = self.run_plan(trigger, now, force)?;
        self.begin_claim_with(run_id, plan, now)
    }

    /// What the next run would be, claiming nothing: the run the thresholds make due, or, when
    /// the table is not due, the manual run `icepack compact` would start; `None` while a run is
    /// in flight. The ticket is the one [`Self::begin_claim`] would hand the pool now (its run id
    /// `preview`), and whether the table is due.
    pub fn preview(&self, now: UnixMillis) -> Option<(ClaimTicket, bool)> {
        let current = &self.snapshot.state;
        if current.claim.is_some() {
            return None;
        }
        let due = self.due(now).is_some();
        let plan = match self.run_plan(Trigger::Manual, now, false) {
            Some(plan) => plan,
            None => self.run_plan(Trigger::Manual, now, true)?,
        };
        let plan = if Self::invalid_last_run(current) {
            plan.over_the_whole_table()
        } else {
            plan
        };
        let claim = Claim {
            run_id: "preview".to_string(),
            trigger: plan.trigger,
            started_millis: now,
            upto_seq: current.next_file_seq,
            counts: current.pending.clone(),
            partitions: self.snapshot.partitions.clone(),
            task: plan.task,
            nonce: String::new(),
        };
        Some((ClaimTicket::from_claim(&claim, current), due))
    }

    /// The last run could not be prepared or finished (`invalid_input`): something its claim
    /// named broke the code, so the next names no partition and does not meet the same input.
    fn invalid_last_run(current: &TableState) -> bool {
        current.last_run.as_ref().and_then(|run| run.failure_class)
            == Some(FailureClass::InvalidInput)
    }

    /// The run a claim now would start (see [`Self::begin_claim`]); `None` when nothing is due
    /// and the run is not forced.
    fn run_plan(&self, trigger: Trigger, now: UnixMillis, force: bool) -> Option<RunPlan> {
        let strategy = self
            .spec
            .strategy
            .for_run(self.snapshot.state.table_order.as_ref());
        let plan = match (self.decision(now), force) {
            (
                Decision::Due {
                    reason,
                    partitions,
                    min_input_files,
                    joining,
                },
                false,
            ) => match strategy {
                Some(strategy) => RunPlan {
                    trigger: Trigger::from(reason),
                    task: Task::Rewrite(Rewrite {
                        partitions,
                        min_input_files,
                        mid_sized: MidSizedFiles::only_in(joining),
                        strategy,
                        apply_deletes: self.deletes_due(),
                    }),
                },
                // `auto` on a table never read: its order first, the run once it is known.
                None => RunPlan::order_read(),
            },
            (_, false) => return None,
            (_, true) => match trigger {
                Trigger::RewriteManifests => {
                    RunPlan::maintenance(trigger, Maintenance::RewriteManifests)
                }
                Trigger::ComputeStatistics => {
                    RunPlan::maintenance(trigger, Maintenance::ComputeStatistics)
                }
                Trigger::Deletes => self.deletes_plan(strategy.unwrap_or_default()),
                // A table's first `remove_orphan_files` only lists what it would remove.
                Trigger::RemoveOrphans => RunPlan::maintenance(
                    trigger,
                    Maintenance::RemoveOrphans {
                        dry_run: !self.snapshot.state.orphans.dry_run_done,
                    },
                ),
                Trigger::Reconcile => RunPlan {
                    trigger,
                    task: Task::Reconcile,
                },
                Trigger::ReadOrder => RunPlan::order_read(),
                // A manual run compacts whatever can be: any partition with two small files or
                // more, mid-sized files too.
                Trigger::Manual
                | Trigger::Files
                | Trigger::Bytes
                | Trigger::Partition
                | Trigger::MaxWait => RunPlan {
                    trigger,
                    task: Task::Rewrite(Rewrite {
                        partitions: Vec::new(),
                        min_input_files: 2.min(self.spec.min_input_files),
                        mid_sized: MidSizedFiles::Everywhere,
                        // An `auto` table never read yet bin-packs (its runs after sort if it
                        // is sorted).
                        strategy: strategy.unwrap_or_default(),
                        apply_deletes: self.spec.deletes.is_on(),
                    }),
                },
            },
        };
        Some(plan)
    }

    /// Claims every pending file for a run that follows `plan`.
    pub fn begin_claim_with(
        &mut self,
        run_id: &str,
        plan: RunPlan,
        now: UnixMillis,
    ) -> Option<(Vec<Op>, ClaimTicket)> {
        assert!(
            self.staged.is_none(),
            "a claim is staged only between batches"
        );
        let current = &self.snapshot.state;
        if current.claim.is_some() {
            return None;
        }
        let plan = if Self::invalid_last_run(current) {
            plan.over_the_whole_table()
        } else {
            plan
        };
        let claim = Claim {
            run_id: run_id.to_string(),
            trigger: plan.trigger,
            started_millis: now,
            upto_seq: current.next_file_seq,
            counts: current.pending.clone(),
            partitions: self.snapshot.partitions.clone(),
            task: plan.task,
            nonce: crate::model::report::random_hex(16),
        };
        let ticket = ClaimTicket::from_claim(&claim, current);
        let state = TableState {
            pending: PendingCounts::default(),
            claim: Some(claim),
            ..current.clone()
        };
        let mut ops = vec![Op::PutTable {
            table: self.spec.table.clone(),
            state: state.clone(),
        }];
        ops.extend(
            self.snapshot
                .partitions
                .keys()
                .map(|partition| Op::DeletePartition {
                    table: self.spec.table.clone(),
                    partition: partition.clone(),
                }),
        );
        self.staged = Some(Box::new(StagedChange {
            state,
            partitions: PartitionUpdate::Replace(BTreeMap::new()),
            counted: Vec::new(),
        }));
        Some((ops, ticket))
    }
}
