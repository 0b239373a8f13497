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
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn limits(weight: u32, max_concurrent: usize) -> TenantLimits {
        TenantLimits {
            weight,
            max_concurrent,
        }
    }

    /// Picks until nothing is eligible: (tenant, table) in pick order.
    fn drain(s: &mut Scheduler<()>) -> Vec<(String, TableIndex)> {
        std::iter::from_fn(|| s.next())
            .map(|(tenant, table, ())| (tenant.to_string(), table))
            .collect()
    }

    fn tenant_of(s: &mut Scheduler<()>) -> Option<String> {
        s.next().map(|(tenant, _, _)| tenant.to_string())
    }

    /// Plays the executor pool with `slots` run slots: the tables become due in `arrivals` order,
    /// each queued and then the free slots filled (as the pool does on every request); then the
    /// runs end one at a time, oldest first, each freed slot filled again. The tables in the order
    /// their runs started.
    fn pool_starts(slots: usize, arrivals: &[(&str, TableIndex)]) -> Vec<TableIndex> {
        let mut s = Scheduler::new();
        let mut running = VecDeque::new();
        let mut started = Vec::new();
        let mut fill = |s: &mut Scheduler<()>, running: &mut VecDeque<Arc<str>>| {
            while running.len() < slots {
                let Some((tenant, table, ())) = s.next() else {
                    break;
                };
                running.push_back(tenant);
                started.push(table);
            }
        };
        for &(tenant, table) in arrivals {
            assert!(s.push(tenant, table, ()));
            fill(&mut s, &mut running);
        }
        while let Some(tenant) = running.pop_front() {
            s.finished(&tenant);
            fill(&mut s, &mut running);
        }
        assert!(s.is_empty());
        started
    }

    /// Issue 15: `a`'s first table takes the only slot as it arrives, which empties `a`'s line;
    /// `a`'s next table must not bring `a` back as a tenant still owed its turn (it did: `b` lost
    /// the tie and waited behind two of `a`'s runs).
    #[test]
    fn with_one_slot_a_tenant_due_at_start_up_runs_second_behind_a_busier_one() {
        let arrivals = [("a", 1), ("a", 2), ("a", 3), ("a", 4), ("a", 5), ("b", 100)];
        assert_eq!(pool_starts(1, &arrivals), [1, 100, 2, 3, 4, 5]);
    }

    /// `a`'s first table took the slot alone; `b` started waiting while `a`'s line was empty, so
    /// `a` came back behind `b`, not level with it: `c`, later, does not overtake `b`.
    #[test]
    fn a_tenant_back_after_its_lone_pick_is_behind_those_waiting_for_their_first() {
        let arrivals = [("a", 1), ("b", 100), ("a", 2), ("c", 200)];
        assert_eq!(pool_starts(1, &arrivals), [1, 100, 200, 2]);
    }

    #[test]
    fn default_limits_are_weight_one_and_unlimited() {
        assert_eq!(TenantLimits::default(), limits(1, usize::MAX));
        let mut s = Scheduler::<()>::default();
        assert!(s.is_empty());
        for table in 0..100 {
            assert!(s.push("a", table, ()));
        }
        assert_eq!(
            drain(&mut s).len(),
            100,
            "no cap for an unregistered tenant"
        );
        assert_eq!(s.running("a"), 100);
    }

    #[test]
    fn a_later_tenant_gets_the_next_free_slot_not_the_busy_tenants_third() {
        let mut s = Scheduler::new();
        for table in 0..50 {
            s.push("a", table, ());
        }
        // Two slots: both go to `a`, the only tenant waiting.
        assert_eq!(
            s.next().map(|(t, table, ())| (t.to_string(), table)),
            Some(("a".into(), 0))
        );
        assert_eq!(
            s.next().map(|(t, table, ())| (t.to_string(), table)),
            Some(("a".into(), 1))
        );
        s.push("b", 100, ());
        s.finished("a");
        assert_eq!(
            s.next().map(|(t, table, ())| (t.to_string(), table)),
            Some(("b".into(), 100))
        );
        s.finished("a");
        assert_eq!(
            s.next().map(|(t, table, ())| (t.to_string(), table)),
            Some(("a".into(), 2))
        );
    }

    #[test]
    fn a_small_tenant_is_not_stuck_behind_a_big_backlog() {
        let mut s = Scheduler::new();
        for table in 0..50 {
            s.push("a", table, ());
        }
        s.push("b", 100, ());
        // Both waiting before any pick: `a` came first, `b` is the second pick (a FIFO: the 51st).
        let picks: Vec<_> = drain(&mut s).into_iter().take(3).collect();
        assert_eq!(
            picks,
            vec![("a".into(), 0), ("b".into(), 100), ("a".into(), 1)]
        );
    }

    #[test]
    fn weights_share_the_picks_smoothly() {
        let mut s = Scheduler::new();
        s.set_tenant("a", limits(3, usize::MAX));
        s.set_tenant("b", limits(1, usize::MAX));
        for table in 0..100 {
            s.push("a", table, ());
            s.push("b", 1000 + table, ());
        }
        let picks: Vec<String> = (0..40).map(|_| tenant_of(&mut s).unwrap()).collect();
        assert_eq!(picks.iter().filter(|t| *t == "a").count(), 30);
        assert_eq!(picks.iter().filter(|t| *t == "b").count(), 10);
        let longest_a_run = picks
            .split(|t| t == "b")
            .map(|run| run.len())
            .max()
            .unwrap();
        assert!(longest_a_run <= 3, "{picks:?}");
        // Any window of one round (4 picks) holds exactly one `b` once the rhythm is set.
        for window in picks[3..].windows(4) {
            assert_eq!(window.iter().filter(|t| *t == "b").count(), 1, "{picks:?}");
        }
    }

    #[test]
    fn a_tenant_refilling_its_line_gets_no_more_than_its_weight() {
        // `x` has one table at a time: it is due again right after each pick, so its line
        // drains and refills; its debt must survive that.
        let mut s = Scheduler::new();
        s.set_tenant("a", limits(3, usize::MAX));
        s.set_tenant("x", limits(1, usize::MAX));
        for table in 0..100 {
            s.push("a", table, ());
        }
        s.push("x", 1000, ());
        let mut x_picks = 0;
        for _ in 0..40 {
            let (tenant, table, ()) = s.next().unwrap();
            if &*tenant == "x" {
                x_picks += 1;
                assert!(s.push("x", table, ()));
            }
        }
        assert!((9..=11).contains(&x_picks), "x got {x_picks} of 40 picks");
    }

    #[test]
    fn a_debt_is_paid_back_while_away() {
        let mut s = Scheduler::new();
        for table in 0..20 {
            s.push("a", table, ());
        }
        s.push("x", 100, ());
        assert_eq!(tenant_of(&mut s).as_deref(), Some("a"));
        assert_eq!(tenant_of(&mut s).as_deref(), Some("x"));
        // Back at once, `x` is still behind: `a` is owed its turn.
        s.push("x", 101, ());
        assert_eq!(tenant_of(&mut s).as_deref(), Some("a"));
        assert_eq!(tenant_of(&mut s).as_deref(), Some("x"));
        // Back after `a` had the slots alone for a while: `x` is owed and goes first.
        for _ in 0..5 {
            assert_eq!(tenant_of(&mut s).as_deref(), Some("a"));
        }
        s.push("x", 102, ());
        assert_eq!(tenant_of(&mut s).as_deref(), Some("x"));
    }

    #[test]
    fn an_old_debt_is_bounded_by_one_round() {
        let mut s = Scheduler::new();
        for (k, tenant) in ["a", "b", "c", "d", "e", "f", "g", "h", "i"]
            .iter()
            .enumerate()
        {
            s.push(tenant, k, ());
        }
        s.push("x", 100, ());
        // The nine others go first (older heads), then `x`: it leaves with a debt of ~a round of
        // ten tenants. The others are gone (removed) when it comes back.
        for table in 0..9 {
            s.push(&format!("late{table}"), 200 + table, ());
        }
        while let Some((tenant, _, ())) = s.next() {
            if &*tenant == "x" {
                break;
            }
        }
        for table in 0..9 {
            assert_eq!(s.remove(200 + table), Some(()));
        }
        assert!(s.is_empty());
        for table in 300..310 {
            s.push("y", table, ());
        }
        s.push("x", 100, ());
        let picks: Vec<String> = (0..3).map(|_| tenant_of(&mut s).unwrap()).collect();
        assert!(picks.contains(&"x".to_string()), "{picks:?}");
    }

    #[test]
    fn max_concurrent_caps_a_tenant_and_frees_the_slot_for_others() {
        let mut s = Scheduler::new();
        s.set_tenant("a", limits(1, 1));
        for table in 0..10 {
            s.push("a", table, ());
        }
        for table in 100..103 {
            s.push("b", table, ());
        }
        assert_eq!(tenant_of(&mut s).as_deref(), Some("a"));
        // `a` is capped: every other pick goes to `b` though `a` is owed.
        for _ in 0..3 {
            assert_eq!(tenant_of(&mut s).as_deref(), Some("b"));
            assert!(s.running("a") <= 1);
        }
        assert_eq!(s.next(), None, "only the capped tenant waits");
        assert_eq!(s.waiting_of("a"), 9);
        s.finished("a");
        assert_eq!(s.next(), Some(("a".into(), 1, ())));
        assert_eq!(s.next(), None);
        assert_eq!(s.running("a"), 1);
        // Raising the limit takes effect at the next pick.
        s.set_tenant("a", limits(1, 3));
        assert_eq!(s.next(), Some(("a".into(), 2, ())));
        assert_eq!(s.next(), Some(("a".into(), 3, ())));
        assert_eq!(s.next(), None);
        assert_eq!(s.running("a"), 3);
    }

    #[test]
    fn started_outside_counts_against_the_limit() {
        let mut s = Scheduler::new();
        s.set_tenant("a", limits(1, 2));
        s.started_outside("a");
        s.started_outside("a");
        s.push("a", 1, ());
        assert_eq!(s.next(), None);
        assert_eq!(s.running("a"), 2);
        s.finished("a");
        assert_eq!(s.next(), Some(("a".into(), 1, ())));
    }

    #[test]
    fn fifo_within_a_tenant_and_a_table_waits_once() {
        let mut s = Scheduler::new();
        for table in [5, 3, 9, 1] {
            assert!(s.push("a", table, table * 10));
        }
        assert!(!s.push("a", 3, 0), "already waiting");
        assert!(!s.push("b", 3, 0), "already waiting, whatever the tenant");
        assert_eq!(s.len(), 4);
        assert!(s.contains(9));
        assert_eq!(s.remove(9), Some(90));
        assert!(!s.contains(9));
        assert_eq!(s.remove(9), None);
        assert_eq!(s.len(), 3);
        assert!(s.push("a", 9, 91), "can wait again once removed");
        let order: Vec<_> = std::iter::from_fn(|| s.next())
            .map(|(_, table, job)| (table, job))
            .collect();
        assert_eq!(order, vec![(5, 50), (3, 30), (1, 10), (9, 91)]);
        assert!(s.is_empty());
        assert!(s.push("a", 5, 0), "a running table can be queued again");
    }

    #[test]
    fn removing_the_last_waiting_table_of_a_tenant() {
        let mut s = Scheduler::new();
        s.push("a", 1, ());
        s.push("b", 2, ());
        assert_eq!(s.remove(1), Some(()));
        assert_eq!(s.waiting_of("a"), 0);
        assert_eq!(s.tenants(), vec![("b".into(), 1, 0)]);
        assert_eq!(s.next(), Some(("b".into(), 2, ())));
        assert_eq!(s.next(), None);
    }

    #[test]
    fn predicted_order_is_the_order_of_next_and_changes_nothing() {
        let mut s = Scheduler::new();
        s.set_tenant("a", limits(3, usize::MAX));
        s.set_tenant("b", limits(2, usize::MAX));
        for table in 0..12 {
            s.push("a", table, ());
        }
        s.next();
        s.next();
        for table in 100..105 {
            s.push("b", table, ());
        }
        s.next();
        for table in 200..203 {
            s.push("c", table, ());
        }
        let predicted = s.predicted_order();
        assert_eq!(predicted, s.predicted_order(), "no state change");
        assert_eq!(predicted.len(), s.len());
        let actual: Vec<_> = drain(&mut s).into_iter().map(|(_, table)| table).collect();
        assert_eq!(predicted, actual);
    }

    #[test]
    fn predicted_order_ignores_limits() {
        let mut s = Scheduler::new();
        s.set_tenant("a", limits(1, 0));
        s.push("a", 1, ());
        s.push("a", 2, ());
        s.push("b", 3, ());
        assert_eq!(s.predicted_order(), vec![1, 3, 2]);
        assert_eq!(s.next(), Some(("b".into(), 3, ())));
        assert_eq!(s.next(), None);
        assert_eq!(s.predicted_order(), vec![1, 2]);
    }

    #[test]
    fn finished_saturates_at_zero() {
        let mut s = Scheduler::<()>::new();
        s.finished("nobody");
        assert_eq!(s.running("nobody"), 0);
        s.push("a", 1, ());
        s.next();
        s.finished("a");
        s.finished("a");
        assert_eq!(s.running("a"), 0);
        assert!(s.tenants().is_empty());
    }

    #[test]
    fn tenants_lists_waiting_and_running_counts() {
        let mut s = Scheduler::new();
        s.set_tenant("idle", TenantLimits::default());
        s.push("b", 1, ());
        s.push("b", 2, ());
        s.push("a", 3, ());
        s.started_outside("c");
        s.next();
        assert_eq!(
            s.tenants(),
            vec![("a".into(), 1, 0), ("b".into(), 1, 1), ("c".into(), 0, 1)]
        );
    }

    #[derive(Debug, Clone)]
    enum Op {
        Push(u8, TableIndex),
        Remove(TableIndex),
        Next,
        Finished(u8),
        SetTenant(u8, u32, usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u8..4, 0usize..30).prop_map(|(t, table)| Op::Push(t, table)),
            1 => (0usize..30).prop_map(Op::Remove),
            3 => Just(Op::Next),
            2 => (0u8..4).prop_map(Op::Finished),
            1 => (0u8..4, 0u32..5, prop_oneof![1usize..4, Just(usize::MAX)])
                .prop_map(|(t, w, m)| Op::SetTenant(t, w, m)),
        ]
    }

    proptest! {
        /// All due at start-up, one slot: each tenant gets its first run before any gets a second,
        /// in the order they became due, however their tables' requests interleave.
        #[test]
        fn with_one_slot_everyone_due_at_start_up_runs_once_before_anyone_runs_twice(
            arrivals in proptest::collection::vec(0u8..4, 1..40),
        ) {
            let names: Vec<String> = arrivals.iter().map(|t| format!("t{t}")).collect();
            let arrivals: Vec<(&str, TableIndex)> =
                names.iter().enumerate().map(|(table, name)| (name.as_str(), table)).collect();
            let mut tenants: Vec<&str> = Vec::new();
            for &(name, _) in &arrivals {
                if !tenants.contains(&name) {
                    tenants.push(name);
                }
            }
            let first_round: Vec<&str> = pool_starts(1, &arrivals)
                .into_iter()
                .take(tenants.len())
                .map(|table| arrivals[table].0)
                .collect();
            prop_assert_eq!(first_round, tenants);
        }

        #[test]
        fn agrees_with_a_model_and_predicts_its_own_order(ops in proptest::collection::vec(op(), 0..200)) {
            let name = |t: u8| format!("t{t}");
            let mut s = Scheduler::new();
            // Model: per tenant its FIFO, running count and limit.
            let mut lines: HashMap<String, VecDeque<TableIndex>> = HashMap::new();
            let mut running: HashMap<String, usize> = HashMap::new();
            let mut caps: HashMap<String, usize> = HashMap::new();
            let mut weights: HashMap<String, u32> = HashMap::new();
            for op in ops {
                match op {
                    Op::Push(t, table) => {
                        let fresh = !lines.values().any(|l| l.contains(&table));
                        prop_assert_eq!(s.push(&name(t), table, table), fresh);
                        if fresh {
                            lines.entry(name(t)).or_default().push_back(table);
                        }
                    }
                    Op::Remove(table) => {
                        let was = lines.values_mut().find_map(|l| {
                            l.iter().position(|&x| x == table).map(|at| l.remove(at))
                        });
                        prop_assert_eq!(s.remove(table), was.flatten());
                    }
                    Op::Next => {
                        let eligible = |t: &String| {
                            lines.get(t).is_some_and(|l| !l.is_empty())
                                && running.get(t).copied().unwrap_or(0)
                                    < caps.get(t).copied().unwrap_or(usize::MAX)
                        };
                        let any = lines.keys().any(eligible);
                        match s.next() {
                            None => prop_assert!(!any),
                            Some((tenant, table, job)) => {
                                let tenant = tenant.to_string();
                                prop_assert!(eligible(&tenant));
                                prop_assert_eq!(table, job);
                                let head = lines.get_mut(&tenant).and_then(|l| l.pop_front());
                                prop_assert_eq!(head, Some(table), "FIFO within a tenant");
                                *running.entry(tenant).or_default() += 1;
                            }
                        }
                    }
                    Op::Finished(t) => {
                        s.finished(&name(t));
                        let r = running.entry(name(t)).or_default();
                        *r = r.saturating_sub(1);
                    }
                    Op::SetTenant(t, weight, max_concurrent) => {
                        s.set_tenant(&name(t), limits(weight, max_concurrent));
                        caps.insert(name(t), max_concurrent);
                        weights.insert(name(t), weight);
                    }
                }
                let waiting: usize = lines.values().map(VecDeque::len).sum();
                prop_assert_eq!(s.len(), waiting);
                for t in 0..4 {
                    let n = name(t);
                    prop_assert_eq!(s.waiting_of(&n), lines.get(&n).map_or(0, VecDeque::len));
                    prop_assert_eq!(s.running(&n), running.get(&n).copied().unwrap_or(0));
                }
            }
            // With the limits lifted, the prediction is exactly what `next` does.
            for (tenant, weight) in &weights {
                s.set_tenant(tenant, limits(*weight, usize::MAX));
            }
            let predicted = s.predicted_order();
            let mut sorted = predicted.clone();
            sorted.sort_unstable();
            let mut expected: Vec<_> = lines.values().flatten().copied().collect();
            expected.sort_unstable();
            prop_assert_eq!(sorted, expected);
            let actual: Vec<_> = std::iter::from_fn(|| s.next()).map(|(_, table, _)| table).collect();
            prop_assert_eq!(predicted, actual);
            prop_assert!(s.is_empty());
        }
    }
}
