//! The executor pool's bookkeeping, without actors: which tables wait for a run slot, which runs
//! hold one, what a run's end hands back, who is told what. Every event returns the [`Effect`]s
//! the actor shell carries out (messages to accumulators, runs to start, answers), as
//! [`crate::runs::scheduler`] returns picks; so the whole handshake is testable with a plain map.
//!
//! The pool is the single owner of "this table asked for a run": requests are idempotent. A
//! table that asks while it waits, or while its run is in flight, changes nothing (a forced
//! request upgrades a waiting one), so an accumulator asks whenever it finds itself due and keeps
//! no flag of its own. Each event that could leave a due table without a request has a follow-up
//! that asks again: a run's end ([`Effect::Deliver`]), a start that claimed nothing
//! ([`PoolCore::not_claimed`]), a start lost with a restarted accumulator (the pool queues the
//! table again itself).
//!
//! Start-up and reloads: accumulators start before the pool has the map that holds their
//! addresses. Requests and recoveries of a table the pool's map does not have yet wait until a
//! map that has it arrives; recoveries are replayed first, so a run in flight is never started a
//! second time.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use crate::base::clock::{Clock, UnixMillis};
use crate::intake::routing::TableIndex;
use crate::model::report::{new_run_id, RunOutcome};
use crate::model::task::Trigger;
use crate::runs::scheduler::{Scheduler, TenantLimits};
use crate::table::accumulator::ClaimTicket;
use crate::table::map::TableMap;

/// Runs whose duration makes the median behind the expected waits.
const RECENT_RUNS: usize = 50;
/// Failed runs remembered per tenant for `/v1/tenants`.
const RECENT_FAILURES_PER_TENANT: usize = 10;

/// What the actor shell does after an event, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Ask the table's accumulator to claim its pending files for this run.
    Start {
        table: TableIndex,
        run_id: String,
        trigger: Trigger,
        force: bool,
    },
    /// Find the end of a run a previous process (or accumulator) had in flight: its slot is held.
    Recover {
        table: TableIndex,
        ticket: ClaimTicket,
    },
    /// Hand the run's outcome to the table's accumulator, which settles its state.
    Deliver {
        table: TableIndex,
        run_id: String,
        outcome: RunOutcome,
    },
    /// Answer everyone waiting for a manual run of the table.
    Answer {
        table: TableIndex,
        answer: Result<RunResult, String>,
    },
    /// Nothing is running or waiting (or nothing will start): wake those waiting for idle.
    Idle,
}

/// How a manual run ended, for whoever asked for it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunResult {
    pub table: String,
    pub run_id: String,
    pub trigger: Trigger,
    pub claimed_files: u64,
    pub claimed_bytes: u64,
    pub outcome: RunOutcome,
}

/// A failed run, as `/v1/tenants` shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FailureNote {
    pub tenant: String,
    pub table: String,
    pub run_id: String,
    pub class: String,
    pub finished_millis: UnixMillis,
}

/// The pool's view: runs in flight and tables waiting for a slot.
#[derive(Debug, Clone, Default)]
pub struct PoolStatus {
    /// (table, run id, started) of each run in flight.
    pub running: Vec<(TableIndex, String, UnixMillis)>,
    /// Tables waiting for a slot, in the order the fair scheduler will start them.
    pub waiting: Vec<TableIndex>,
    /// Run slots of the pool.
    pub slots: usize,
    /// Median duration of the recent runs; `None` before the first one ended.
    pub median_run_millis: Option<u64>,
    /// The latest failed runs, newest last (a few per tenant).
    pub recent_failures: Vec<FailureNote>,
}

impl PoolStatus {
    /// For every waiting table: where it waits (0: next), and how long until it starts at the
    /// recent pace — the runs ahead of it spread over the slots, each taking the median run time.
    pub fn queue_estimates(&self) -> HashMap<TableIndex, (usize, Option<u64>)> {
        let slots = self.slots.max(1);
        // A full pool: the first in line waits for one run to end too.
        let busy = u64::from(self.running.len() >= slots);
        self.waiting
            .iter()
            .enumerate()
            .map(|(position, &table)| {
                let expected = self
                    .median_run_millis
                    .map(|median| ((position / slots) as u64 + busy) * median);
                (table, (position, expected))
            })
            .collect()
    }
}

/// A table waiting for a slot: its trigger and whether the run is forced.
#[derive(Debug)]
struct Request {
    trigger: Trigger,
    force: bool,
}

/// A run holding a slot.
#[derive(Debug)]
struct Slot {
    run_id: String,
    started_millis: UnixMillis,
    tenant: String,
    /// What started it, to queue the table again when the start was lost.
    trigger: Trigger,
    force: bool,
}

/// The pool's state. `A` is whatever the map holds per table (an actor address in the service,
/// `()` in tests): this module never touches it.
pub struct PoolCore<A> {
    max_concurrent: usize,
    clock: Arc<dyn Clock>,
    /// `false` (replay --no-compact, shutting down): requests are noted, never started.
    enabled: bool,
    /// Empty until the pipeline hands over the first map.
    map: Arc<TableMap<A>>,
    early_requests: Vec<(TableIndex, Request)>,
    early_recoveries: Vec<(TableIndex, ClaimTicket)>,
    waiting: Scheduler<Request>,
    running: HashMap<TableIndex, Slot>,
    recent_runs_millis: VecDeque<u64>,
    recent_failures: HashMap<String, VecDeque<FailureNote>>,
    /// Tables someone waits on for a manual run.
    manual: HashSet<TableIndex>,
    /// Outcomes of runs whose accumulator was down when they ended: handed to the restarted one.
    undelivered: HashMap<TableIndex, (String, RunOutcome)>,
    /// Runs whose outcome was handed over that way: the restarted accumulator's report of the
    /// claim it loaded is not a run to recover.
    handed_over: HashSet<String>,
}

impl<A: Clone> PoolCore<A> {
    pub fn new(max_concurrent: usize, clock: Arc<dyn Clock>, enabled: bool) -> Self {
        PoolCore {
            max_concurrent,
            clock,
            enabled,
            map: Arc::new(TableMap::default()),
            early_requests: Vec::new(),
            early_recoveries: Vec::new(),
            waiting: Scheduler::new(),
            running: HashMap::new(),
            recent_runs_millis: VecDeque::new(),
            recent_failures: HashMap::new(),
            manual: HashSet::new(),
            undelivered: HashMap::new(),
            handed_over: HashSet::new(),
        }
    }

    /// The map the pool works from.
    pub fn map(&self) -> &Arc<TableMap<A>> {
        &self.map
    }

    /// Whether the table is known to the map the pool has (else its messages wait for one).
    fn knows(&self, table: TableIndex) -> bool {
        table < self.map.len()
    }

    /// The first map, or a reload's: tenants' limits apply at once, what waited for the map is
    /// handled, a table moved to another tenant waits in that tenant's line, removed tables leave
    /// the line (their runs in flight go on and settle).
    pub fn set_map(&mut self, map: Arc<TableMap<A>>) -> Vec<Effect> {
        let previous = std::mem::replace(&mut self.map, map);
        for tenant in self.map.tenants() {
            self.waiting.set_tenant(
                &tenant.name,
                TenantLimits {
                    weight: tenant.weight,
                    max_concurrent: tenant.max_concurrent_runs,
                },
            );
        }
        let mut effects = Vec::new();
        let (recoveries, waited): (Vec<_>, Vec<_>) = std::mem::take(&mut self.early_recoveries)
            .into_iter()
            .partition(|(table, _)| self.knows(*table));
        self.early_recoveries = waited;
        for (table, ticket) in recoveries {
            effects.extend(self.recover(table, ticket));
        }
        let (requests, waited): (Vec<_>, Vec<_>) = std::mem::take(&mut self.early_requests)
            .into_iter()
            .partition(|(table, _)| self.knows(*table));
        self.early_requests = waited;
        for (table, request) in requests {
            self.enqueue(table, request);
        }
        for table in 0..previous.len().min(self.map.len()) {
            let tenant = &self.map.spec(table).tenant;
            if self.map.is_active(table) && previous.spec(table).tenant != *tenant {
                if let Some(request) = self.waiting.remove(table) {
                    self.waiting.push(tenant, table, request);
                }
            }
        }
        for table in 0..self.map.len() {
            if !self.map.is_active(table)
                && self.waiting.remove(table).is_some()
                && self.manual.remove(&table)
            {
                effects.push(Effect::Answer {
                    table,
                    answer: Err("the table was removed from the configuration".to_string()),
                });
            }
        }
        self.dispatch(&mut effects);
        effects
    }

    /// A reload changed the number of slots.
    pub fn set_max_concurrent(&mut self, max_concurrent: usize) -> Vec<Effect> {
        self.max_concurrent = max_concurrent;
        let mut effects = Vec::new();
        self.dispatch(&mut effects);
        effects
    }

    /// A table asks for a run. Idempotent: a table that waits already keeps its place (a forced
    /// request makes its run forced), one whose run is in flight or that the configuration no
    /// longer has changes nothing.
    pub fn request(&mut self, table: TableIndex, trigger: Trigger, force: bool) -> Vec<Effect> {
        let request = Request { trigger, force };
        if !self.knows(table) {
            if let Some((_, early)) = self.early_requests.iter_mut().find(|(t, _)| *t == table) {
                upgrade(early, request);
            } else {
                self.early_requests.push((table, request));
            }
            return Vec::new();
        }
        let mut effects = Vec::new();
        if self.enqueue(table, request) {
            self.dispatch(&mut effects);
        }
        effects
    }

    /// `true` when the table joined the line.
    fn enqueue(&mut self, table: TableIndex, request: Request) -> bool {
        if self.running.contains_key(&table) || !self.map.is_active(table) {
            return false;
        }
        if let Some(waiting) = self.waiting.job_mut(table) {
            upgrade(waiting, request);
            return false;
        }
        let tenant = self.map.spec(table).tenant.clone();
        self.waiting.push(&tenant, table, request)
    }

    /// Fills free slots in the scheduler's order.
    fn dispatch(&mut self, effects: &mut Vec<Effect>) {
        if self.enabled && !self.map.is_empty() {
            while self.running.len() < self.max_concurrent {
                let Some((tenant, table, request)) = self.waiting.next() else {
                    break;
                };
                let now = self.clock.now_millis();
                let run_id = new_run_id(now);
                self.running.insert(
                    table,
                    Slot {
                        run_id: run_id.clone(),
                        started_millis: now,
                        tenant: tenant.to_string(),
                        trigger: request.trigger,
                        force: request.force,
                    },
                );
                effects.push(Effect::Start {
                    table,
                    run_id,
                    trigger: request.trigger,
                    force: request.force,
                });
            }
        }
        if self.is_idle() {
            effects.push(Effect::Idle);
        }
    }

    /// No run in flight, and none will start (nothing waits, or nothing may start).
    pub fn is_idle(&self) -> bool {
        self.running.is_empty() && (self.waiting.is_empty() || !self.enabled)
    }

    /// The slot of a run is free again.
    fn release(&mut self, table: TableIndex, run_id: &str) -> Option<Slot> {
        match self.running.get(&table) {
            Some(slot) if slot.run_id == run_id => {
                let slot = self.running.remove(&table)?;
                self.waiting.finished(&slot.tenant);
                Some(slot)
            }
            _ => None,
        }
    }

    /// The accumulator claimed nothing for the run (nothing pending, or the claim's commit
    /// failed): its slot is free, a manual waiter hears why.
    pub fn not_claimed(&mut self, table: TableIndex, run_id: &str) -> Vec<Effect> {
        let mut effects = Vec::new();
        self.release(table, run_id);
        if self.manual.remove(&table) {
            effects.push(Effect::Answer {
                table,
                answer: Err("the table has a run in flight already".to_string()),
            });
        }
        self.dispatch(&mut effects);
        effects
    }

    /// A restarted accumulator, with the claim it loaded (if any). An outcome that waited for it
    /// is handed over; a run whose start it never claimed frees its slot, and the table waits in
    /// line again (the new accumulator may have asked while the slot was held).
    pub fn accumulator_restarted(
        &mut self,
        table: TableIndex,
        claimed_run: Option<&str>,
    ) -> Vec<Effect> {
        let mut effects = Vec::new();
        if let Some((run_id, outcome)) = self.undelivered.remove(&table) {
            if claimed_run == Some(run_id.as_str()) {
                self.handed_over.insert(run_id.clone());
                effects.push(Effect::Deliver {
                    table,
                    run_id,
                    outcome,
                });
            }
        }
        let Some(slot) = self.running.get(&table) else {
            return effects;
        };
        if claimed_run == Some(slot.run_id.as_str()) {
            // Claimed and running: its outcome reaches the new accumulator.
            return effects;
        }
        let run_id = slot.run_id.clone();
        let Some(slot) = self.release(table, &run_id) else {
            return effects;
        };
        if self.manual.remove(&table) {
            effects.push(Effect::Answer {
                table,
                answer: Err(
                    "the table's accumulator stopped before the run could start; try again"
                        .to_string(),
                ),
            });
        } else {
            self.enqueue(
                table,
                Request {
                    trigger: slot.trigger,
                    force: slot.force,
                },
            );
        }
        self.dispatch(&mut effects);
        effects
    }

    /// An accumulator found a claim in the store that this pool did not start (a previous
    /// process's run, or a claim whose commit was reported failed): it holds a slot until its end
    /// is found.
    pub fn recover(&mut self, table: TableIndex, ticket: ClaimTicket) -> Vec<Effect> {
        if !self.knows(table) {
            self.early_recoveries.push((table, ticket));
            return Vec::new();
        }
        if self.handed_over.remove(&ticket.run_id)
            || self
                .running
                .get(&table)
                .is_some_and(|slot| slot.run_id == ticket.run_id)
        {
            // A restarted accumulator reporting the run this pool is running: nothing to recover.
            return Vec::new();
        }
        let tenant = self.map.spec(table).tenant.clone();
        self.waiting.started_outside(&tenant);
        // A request of the table that waited meanwhile is served by this run's end.
        self.waiting.remove(table);
        self.running.insert(
            table,
            Slot {
                run_id: ticket.run_id.clone(),
                started_millis: ticket.started_millis,
                tenant,
                trigger: ticket.trigger,
                force: true,
            },
        );
        vec![Effect::Recover { table, ticket }]
    }

    /// A manual run (`trigger`: `manual` or `reconcile`): refused when the table is not
    /// configured or runs already; else it waits in line, forced, and [`Effect::Answer`] tells
    /// how it ended.
    pub fn compact_now(
        &mut self,
        table: TableIndex,
        trigger: Trigger,
    ) -> Result<Vec<Effect>, String> {
        if !self.map.is_active(table) {
            return Err("the table is not configured".to_string());
        }
        if self.running.contains_key(&table) {
            return Err("the table has a run in flight already".to_string());
        }
        self.manual.insert(table);
        let mut effects = Vec::new();
        self.enqueue(
            table,
            Request {
                trigger,
                force: true,
            },
        );
        self.dispatch(&mut effects);
        Ok(effects)
    }

    /// A run ended (or its recovery found its end). Frees its slot, remembers it, hands the
    /// outcome to the accumulator (kept for its restart when it is down: `connected`), answers a
    /// manual waiter, and starts what may start. Returns when the run started (its slot's start,
    /// else the claim's) with the effects.
    pub fn finish(
        &mut self,
        table: TableIndex,
        ticket: &ClaimTicket,
        outcome: RunOutcome,
        connected: bool,
    ) -> (UnixMillis, Vec<Effect>) {
        let run_id = &ticket.run_id;
        let started_millis = self
            .release(table, run_id)
            .map_or(ticket.started_millis, |slot| slot.started_millis);
        // A data rewrite or maintenance counts as a run; a reconcile (a read) does not.
        if !ticket.task.is_read() {
            self.remember_run(table, run_id, &outcome);
        }
        let mut effects = Vec::new();
        let manual = self.manual.remove(&table).then(|| RunResult {
            table: self.map.spec(table).table.clone(),
            run_id: run_id.clone(),
            trigger: ticket.trigger,
            claimed_files: ticket.files,
            claimed_bytes: ticket.bytes,
            outcome: outcome.clone(),
        });
        if connected {
            effects.push(Effect::Deliver {
                table,
                run_id: run_id.clone(),
                outcome,
            });
        } else {
            self.undelivered.insert(table, (run_id.clone(), outcome));
        }
        if let Some(result) = manual {
            effects.push(Effect::Answer {
                table,
                answer: Ok(result),
            });
        }
        self.dispatch(&mut effects);
        (started_millis, effects)
    }

    fn remember_run(&mut self, table: TableIndex, run_id: &str, outcome: &RunOutcome) {
        let duration = match outcome {
            RunOutcome::Success {
                duration_millis, ..
            }
            | RunOutcome::Failure {
                duration_millis, ..
            } => *duration_millis,
        };
        if self.recent_runs_millis.len() == RECENT_RUNS {
            self.recent_runs_millis.pop_front();
        }
        self.recent_runs_millis.push_back(duration);
        if let Some(class) = outcome.failure_class() {
            let spec = self.map.spec(table);
            let failures = self.recent_failures.entry(spec.tenant.clone()).or_default();
            if failures.len() == RECENT_FAILURES_PER_TENANT {
                failures.pop_front();
            }
            failures.push_back(FailureNote {
                tenant: spec.tenant.clone(),
                table: spec.table.clone(),
                run_id: run_id.to_string(),
                class: class.as_str().to_string(),
                finished_millis: self.clock.now_millis(),
            });
        }
    }

    /// Shutting down: start no more runs (those in flight go on).
    pub fn stop_dispatching(&mut self) -> Vec<Effect> {
        self.enabled = false;
        let mut effects = Vec::new();
        self.dispatch(&mut effects);
        effects
    }

    /// The run holding the table's slot.
    pub fn running_run(&self, table: TableIndex) -> Option<&str> {
        self.running.get(&table).map(|slot| slot.run_id.as_str())
    }

    /// The run ids holding a slot.
    pub fn running_runs(&self) -> HashSet<String> {
        self.running
            .values()
            .map(|slot| slot.run_id.clone())
            .collect()
    }

    pub fn status(&self) -> PoolStatus {
        let mut durations: Vec<u64> = self.recent_runs_millis.iter().copied().collect();
        durations.sort_unstable();
        PoolStatus {
            running: self
                .running
                .iter()
                .map(|(table, slot)| (*table, slot.run_id.clone(), slot.started_millis))
                .collect(),
            waiting: self.waiting.predicted_order(),
            slots: self.max_concurrent,
            median_run_millis: durations.get(durations.len() / 2).copied(),
            recent_failures: self.recent_failures.values().flatten().cloned().collect(),
        }
    }
}

/// A second request for a waiting table: a forced one makes the run forced, with its trigger.
fn upgrade(waiting: &mut Request, request: Request) {
    if request.force && !waiting.force {
        *waiting = request;
    }
}

#[cfg(test)]
mod tests;
