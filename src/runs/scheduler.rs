//! Which due table gets the next free run slot? A pure, fair scheduler over tenants.
//!
//! Tenants share the bounded pool of run slots. Each tenant has a FIFO line of waiting tables
//! (oldest request first). Across tenants the pick is a smooth weighted round-robin (nginx's
//! algorithm): every eligible tenant's `current` grows by its weight, the highest `current` is
//! picked, and the picked tenant's `current` shrinks by the sum of the eligible tenants' weights.
//! Over a stretch where the same tenants compete, each gets picks in proportion to its weight,
//! spread out rather than in bursts. Ties go to the tenant whose first waiting table has waited
//! longest (a global enqueue sequence number). A tenant is eligible while it has waiting tables
//! and fewer runs in progress than its `max_concurrent`; an ineligible tenant's `current` stays
//! where it is (it earns nothing while capped).
//!
//! The round-robin itself says nothing about tenants that start or stop waiting, so:
//! - A tenant that starts waiting is placed level with the most owed waiting tenant (the highest
//!   `current`), and one ahead of it when that tenant has had a pick since it started waiting. A
//!   newcomer so goes right after the tenants that have not had their turn yet, and before a
//!   tenant of at most its weight that has been taking the slots alone (a heavier one may take
//!   one more pick first: its larger share).
//! - A tenant that stops waiting right after a pick keeps its debt (how far it was behind that
//!   level; with nobody else waiting, behind the level a newcomer would have got) and, back
//!   before any other pick, counts as picked since it started waiting. So draining and refilling
//!   its line (its only table taking a free slot, the next one due at once) earns it neither more
//!   than its weight nor the tie against a newcomer. The debt is paid back at its weight per pick
//!   while it is away and never exceeds one round (the sum of the weights of the tenants waiting
//!   when it comes back), so an old debt never starves it.
//!
//! Only differences between `current` values matter; they are re-centred around zero whenever a
//! tenant starts or stops waiting, which keeps them bounded. No clocks, no I/O: the executor pool
//! owns the slots and calls [`Scheduler::next`] whenever one is free.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::intake::routing::TableIndex;

/// A tenant's share of the run slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TenantLimits {
    /// Share of the picks when tenants compete; 0 counts as 1.
    pub weight: u32,
    /// Runs of the tenant at the same time.
    pub max_concurrent: usize,
}

impl Default for TenantLimits {
    fn default() -> Self {
        TenantLimits {
            weight: 1,
            max_concurrent: usize::MAX,
        }
    }
}

impl TenantLimits {
    fn weight(self) -> i64 {
        i64::from(self.weight.max(1))
    }
}

/// One waiting table.
#[derive(Debug)]
struct Waiting<J> {
    seq: u64,
    table: TableIndex,
    job: J,
}

#[derive(Debug)]
struct Tenant<J> {
    name: Arc<str>,
    limits: TenantLimits,
    running: usize,
    /// The round-robin credit; meaningful while the tenant waits.
    current: i64,
    /// Picked since it started waiting. Kept while it is not waiting: back before any other pick
    /// (its line drained by its own pick and refilled), it is still the tenant just served.
    served: bool,
    /// While not waiting: how far (<= 0) behind the join level it stopped waiting (with nobody
    /// else waiting, the level a newcomer would have got beside it).
    debt: i64,
    /// `Scheduler::picks` when it stopped waiting.
    left_at: u64,
    /// Position in `Scheduler::active` while it waits.
    active_at: Option<usize>,
    line: VecDeque<Waiting<J>>,
}

impl<J> Tenant<J> {
    fn new(name: Arc<str>) -> Self {
        Tenant {
            name,
            limits: TenantLimits::default(),
            running: 0,
            current: 0,
            served: false,
            debt: 0,
            left_at: 0,
            active_at: None,
            line: VecDeque::new(),
        }
    }

    fn eligible(&self) -> bool {
        !self.line.is_empty() && self.running < self.limits.max_concurrent
    }

    fn head_seq(&self) -> u64 {
        self.line.front().map_or(u64::MAX, |w| w.seq)
    }
}

/// Whether a candidate `(current, head seq)` beats the best so far.
fn beats(current: i64, seq: u64, best: Option<(i64, u64)>) -> bool {
    match best {
        None => true,
        Some((best_current, best_seq)) => {
            current > best_current || (current == best_current && seq < best_seq)
        }
    }
}

/// Fair line of due tables over tenants; `J` is the caller's job payload.
#[derive(Debug)]
pub struct Scheduler<J> {
    /// Every tenant seen (configured tenants are few; they are never forgotten).
    tenants: Vec<Tenant<J>>,
    by_name: HashMap<Arc<str>, usize>,
    /// Tenants with waiting tables, in no particular order.
    active: Vec<usize>,
    /// Waiting table -> its tenant.
    waiting: HashMap<TableIndex, usize>,
    next_seq: u64,
    /// Picks made so far.
    picks: u64,
}

impl<J> Default for Scheduler<J> {
    fn default() -> Self {
        Self::new()
    }
}

impl<J> Scheduler<J> {
    pub fn new() -> Self {
        Scheduler {
            tenants: Vec::new(),
            by_name: HashMap::new(),
            active: Vec::new(),
            waiting: HashMap::new(),
            next_seq: 0,
            picks: 0,
        }
    }

    /// Sets or changes a tenant's limits (takes effect at the next pick).
    pub fn set_tenant(&mut self, tenant: &str, limits: TenantLimits) {
        let i = self.tenant_index(tenant);
        self.tenants[i].limits = limits;
    }

    /// Queues a table of a tenant; false (job dropped) when the table is waiting already.
    pub fn push(&mut self, tenant: &str, table: TableIndex, job: J) -> bool {
        if self.waiting.contains_key(&table) {
            return false;
        }
        let i = self.tenant_index(tenant);
        let seq = self.next_seq;
        self.next_seq += 1;
        self.waiting.insert(table, i);
        if self.tenants[i].active_at.is_none() {
            self.join(i);
        }
        self.tenants[i].line.push_back(Waiting { seq, table, job });
        true
    }

    /// Takes a table out of the line (table removed by a config reload); its job if it was waiting.
    pub fn remove(&mut self, table: TableIndex) -> Option<J> {
        let i = self.waiting.remove(&table)?;
        let line = &mut self.tenants[i].line;
        let at = line.iter().position(|w| w.table == table)?;
        let removed = line.remove(at)?;
        if line.is_empty() {
            self.leave(i);
        }
        Some(removed.job)
    }

    /// The job of a waiting table, to change it in place.
    pub fn job_mut(&mut self, table: TableIndex) -> Option<&mut J> {
        let i = *self.waiting.get(&table)?;
        self.tenants[i]
            .line
            .iter_mut()
            .find(|waiting| waiting.table == table)
            .map(|waiting| &mut waiting.job)
    }

    pub fn contains(&self, table: TableIndex) -> bool {
        self.waiting.contains_key(&table)
    }

    /// The next table to run, or None when nothing waiting is eligible. Counts it as running
    /// for its tenant. Returns (tenant name, table, job).
    // Not an `Iterator`: None only means "nothing eligible now"; a later call may return a table.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<(Arc<str>, TableIndex, J)> {
        let mut total = 0i64;
        let mut best: Option<(i64, u64)> = None;
        let mut picked = None;
        for &i in &self.active {
            let tenant = &mut self.tenants[i];
            if !tenant.eligible() {
                continue;
            }
            let weight = tenant.limits.weight();
            tenant.current += weight;
            total += weight;
            let seq = tenant.head_seq();
            if beats(tenant.current, seq, best) {
                best = Some((tenant.current, seq));
                picked = Some(i);
            }
        }
        let i = picked?;
        self.picks += 1;
        let tenant = &mut self.tenants[i];
        tenant.current -= total;
        tenant.served = true;
        tenant.running += 1;
        let name = tenant.name.clone();
        let head = tenant.line.pop_front()?;
        let drained = tenant.line.is_empty();
        self.waiting.remove(&head.table);
        if drained {
            self.leave(i);
        }
        Some((name, head.table, head.job))
    }

    /// A run of this tenant ended (or never started): frees one of its running counts (saturating).
    pub fn finished(&mut self, tenant: &str) {
        if let Some(&i) = self.by_name.get(tenant) {
            let tenant = &mut self.tenants[i];
            tenant.running = tenant.running.saturating_sub(1);
        }
    }

    /// Marks a run as running for a tenant without going through the line (a run recovered after
    /// a restart).
    pub fn started_outside(&mut self, tenant: &str) {
        let i = self.tenant_index(tenant);
        self.tenants[i].running += 1;
    }

    pub fn running(&self, tenant: &str) -> usize {
        self.by_name
            .get(tenant)
            .map_or(0, |&i| self.tenants[i].running)
    }

    /// Waiting tables, all tenants.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    pub fn waiting_of(&self, tenant: &str) -> usize {
        self.by_name
            .get(tenant)
            .map_or(0, |&i| self.tenants[i].line.len())
    }

    /// The predicted dispatch order of every waiting table (first = next), as if each tenant's
    /// limit allowed all its waiting tables: the round-robin and weights are applied, the limits
    /// ignored so the prediction never stalls. Leaves the scheduler as it is (works on copies of
    /// the `current` values). Costs O(waiting tables x waiting tenants).
    pub fn predicted_order(&self) -> Vec<TableIndex> {
        struct Sim<'a, J> {
            current: i64,
            weight: i64,
            line: &'a VecDeque<Waiting<J>>,
            at: usize,
        }
        let mut sims: Vec<Sim<'_, J>> = self
            .active
            .iter()
            .map(|&i| {
                let tenant = &self.tenants[i];
                Sim {
                    current: tenant.current,
                    weight: tenant.limits.weight(),
                    line: &tenant.line,
                    at: 0,
                }
            })
            .collect();
        let mut total: i64 = sims.iter().map(|s| s.weight).sum();
        let mut order = Vec::with_capacity(self.waiting.len());
        while let Some(first) = sims.first() {
            if sims.len() == 1 {
                order.extend(first.line.iter().skip(first.at).map(|w| w.table));
                break;
            }
            let mut best: Option<(i64, u64)> = None;
            let mut picked = 0;
            for (k, sim) in sims.iter_mut().enumerate() {
                sim.current += sim.weight;
                let seq = sim.line[sim.at].seq;
                if beats(sim.current, seq, best) {
                    best = Some((sim.current, seq));
                    picked = k;
                }
            }
            let sim = &mut sims[picked];
            sim.current -= total;
            order.push(sim.line[sim.at].table);
            sim.at += 1;
            if sim.at == sim.line.len() {
                total -= sim.weight;
                sims.swap_remove(picked);
            }
        }
        order
    }

    /// Tenants with anything waiting or running, and their (waiting, running) counts, by name.
    pub fn tenants(&self) -> Vec<(Arc<str>, usize, usize)> {
        let mut tenants: Vec<_> = self
            .tenants
            .iter()
            .filter(|t| !t.line.is_empty() || t.running > 0)
            .map(|t| (t.name.clone(), t.line.len(), t.running))
            .collect();
        tenants.sort_by(|a, b| a.0.cmp(&b.0));
        tenants
    }

    fn tenant_index(&mut self, tenant: &str) -> usize {
        if let Some(&i) = self.by_name.get(tenant) {
            return i;
        }
        let name: Arc<str> = Arc::from(tenant);
        let i = self.tenants.len();
        self.tenants.push(Tenant::new(name.clone()));
        self.by_name.insert(name, i);
        i
    }

    /// Where a tenant starting to wait is placed (before its debt): level with the most owed
    /// waiting tenant, one ahead when that one has had a pick since it started waiting.
    fn join_level(&self) -> Option<i64> {
        self.active
            .iter()
            .map(|&j| {
                let tenant = &self.tenants[j];
                tenant.current + i64::from(tenant.served)
            })
            .max()
    }

    /// Tenant `i` starts waiting.
    fn join(&mut self, i: usize) {
        let current = match self.join_level() {
            None => 0,
            Some(level) => {
                let tenant = &self.tenants[i];
                let weight = tenant.limits.weight();
                let round: i64 = weight
                    + self
                        .active
                        .iter()
                        .map(|&j| self.tenants[j].limits.weight())
                        .sum::<i64>();
                let away = i64::try_from(self.picks - tenant.left_at).unwrap_or(i64::MAX);
                let debt = tenant
                    .debt
                    .saturating_add(away.saturating_mul(weight))
                    .clamp(-round, 0);
                level + debt
            }
        };
        let back_before_any_pick = self.picks == self.tenants[i].left_at;
        let tenant = &mut self.tenants[i];
        tenant.current = current;
        tenant.served &= back_before_any_pick;
        tenant.debt = 0;
        tenant.active_at = Some(self.active.len());
        self.active.push(i);
        self.recenter();
    }

    /// Tenant `i` stops waiting (its line is empty).
    fn leave(&mut self, i: usize) {
        let Some(at) = self.tenants[i].active_at.take() else {
            return;
        };
        self.active.swap_remove(at);
        if let Some(&moved) = self.active.get(at) {
            self.tenants[moved].active_at = Some(at);
        }
        let tenant = &self.tenants[i];
        let level = self
            .join_level()
            .unwrap_or(tenant.current + i64::from(tenant.served));
        let debt = (tenant.current - level).min(0);
        let tenant = &mut self.tenants[i];
        tenant.debt = debt;
        tenant.left_at = self.picks;
        tenant.current = 0;
        self.recenter();
    }

    /// Shifts the waiting tenants' `current` values so they average about zero (picks depend
    /// only on their differences).
    fn recenter(&mut self) {
        let Ok(n) = i64::try_from(self.active.len()) else {
            return;
        };
        if n == 0 {
            return;
        }
        let sum: i64 = self.active.iter().map(|&j| self.tenants[j].current).sum();
        let mean = sum.div_euclid(n);
        if mean != 0 {
            for &j in &self.active {
                self.tenants[j].current -= mean;
            }
        }
    }
}

#[cfg(test)]
mod tests;
