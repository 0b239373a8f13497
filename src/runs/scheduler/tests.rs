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
