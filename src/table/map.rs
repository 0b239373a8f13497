//! The live table map: every table the process has known since it started, its accumulator, and
//! whether the current configuration still has it.
//!
//! Indices ([`TableIndex`]) are stable for the life of the process. A reload that removes a table
//! leaves its slot in place, inactive (its state stays in the store); a table added later gets the
//! next slot; a table that comes back gets its old slot again. Actors hold an `Arc<TableMap>`
//! snapshot and are handed a new one when the configuration changes.
//!
//! A slot's accumulator handle is shared by every snapshot: when the table's accumulator is
//! started (lazily, or again after a panic) or stops, every holder of any snapshot sees it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::config::{TableSpec, TenantSpec};
use crate::intake::routing::TableIndex;

/// The tables and, for each, the handle `A` of its accumulator (shared by every snapshot of the
/// map): generic, so this catalogue knows nothing of the actors
/// ([`TableHandles`](crate::table::handle::TableHandles) is the one the pipeline uses).
pub struct TableMap<A> {
    specs: Vec<Arc<TableSpec>>,
    active: Vec<bool>,
    accumulators: Vec<A>,
    by_name: HashMap<String, TableIndex>,
    tenants: BTreeMap<String, Arc<TenantSpec>>,
}

impl<A: Clone> Clone for TableMap<A> {
    fn clone(&self) -> Self {
        TableMap {
            specs: self.specs.clone(),
            active: self.active.clone(),
            accumulators: self.accumulators.clone(),
            by_name: self.by_name.clone(),
            tenants: self.tenants.clone(),
        }
    }
}

impl<A> Default for TableMap<A> {
    fn default() -> Self {
        TableMap {
            specs: Vec::new(),
            active: Vec::new(),
            accumulators: Vec::new(),
            by_name: HashMap::new(),
            tenants: BTreeMap::new(),
        }
    }
}

impl<A: Clone> TableMap<A> {
    /// A map of the given tables (all active), in order, with their accumulators.
    pub fn new(
        specs: Vec<Arc<TableSpec>>,
        accumulators: Vec<A>,
        tenants: Vec<TenantSpec>,
    ) -> TableMap<A> {
        assert_eq!(specs.len(), accumulators.len());
        let by_name = specs
            .iter()
            .enumerate()
            .map(|(index, spec)| (spec.table.clone(), index))
            .collect();
        TableMap {
            active: vec![true; specs.len()],
            specs,
            accumulators,
            by_name,
            tenants: tenants
                .into_iter()
                .map(|tenant| (tenant.name.clone(), Arc::new(tenant)))
                .collect(),
        }
    }

    /// Every slot, active or not.
    pub fn len(&self) -> usize {
        self.specs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.specs.is_empty()
    }

    pub fn spec(&self, table: TableIndex) -> &Arc<TableSpec> {
        &self.specs[table]
    }

    /// Every slot's spec (inactive ones keep their last spec), indexed by [`TableIndex`].
    pub fn specs(&self) -> &[Arc<TableSpec>] {
        &self.specs
    }

    pub fn accumulator(&self, table: TableIndex) -> A {
        self.accumulators[table].clone()
    }

    pub fn is_active(&self, table: TableIndex) -> bool {
        self.active.get(table).copied().unwrap_or(false)
    }

    /// The slot of a table, configured or removed.
    pub fn index_of(&self, table: &str) -> Option<TableIndex> {
        self.by_name.get(table).copied()
    }

    /// The slot of a table the current configuration has.
    pub fn active_index_of(&self, table: &str) -> Option<TableIndex> {
        self.index_of(table).filter(|&index| self.active[index])
    }

    /// The tables of the current configuration, in slot order.
    pub fn active(&self) -> impl Iterator<Item = (TableIndex, &Arc<TableSpec>)> {
        self.specs
            .iter()
            .enumerate()
            .filter(|(index, _)| self.active[*index])
    }

    pub fn num_active(&self) -> usize {
        self.active.iter().filter(|active| **active).count()
    }

    pub fn tenants(&self) -> impl Iterator<Item = &Arc<TenantSpec>> {
        self.tenants.values()
    }

    /// The next map: `changes` decided by [`plan_changes`], `started` the accumulators of the
    /// added tables (in the plan's order).
    pub fn apply(
        &self,
        changes: &MapChanges,
        started: Vec<A>,
        tenants: Vec<TenantSpec>,
    ) -> TableMap<A> {
        assert_eq!(changes.added.len(), started.len());
        let mut next = self.clone();
        next.active.iter_mut().for_each(|active| *active = false);
        for (index, spec) in &changes.kept {
            next.specs[*index] = spec.clone();
            next.active[*index] = true;
        }
        for (spec, accumulator) in changes.added.iter().zip(started) {
            next.by_name.insert(spec.table.clone(), next.specs.len());
            next.specs.push(spec.clone());
            next.active.push(true);
            next.accumulators.push(accumulator);
        }
        next.tenants = tenants
            .into_iter()
            .map(|tenant| (tenant.name.clone(), Arc::new(tenant)))
            .collect();
        next
    }
}

/// What a new configuration changes in the map.
#[derive(Debug, Default, Clone)]
pub struct MapChanges {
    /// Tables with a slot already (active, or coming back), with their new spec.
    pub kept: Vec<(TableIndex, Arc<TableSpec>)>,
    /// Of `kept`: the ones whose spec differs from the slot's, or that come back.
    pub changed: Vec<TableIndex>,
    /// Tables never seen by this process: they get new slots, in this order.
    pub added: Vec<Arc<TableSpec>>,
    /// Active tables the new configuration no longer has.
    pub removed: Vec<TableIndex>,
}

/// Compares the current map with the tables of a new configuration. Pure.
pub fn plan_changes<A: Clone>(map: &TableMap<A>, specs: Vec<TableSpec>) -> MapChanges {
    let mut changes = MapChanges::default();
    let mut still_configured = vec![false; map.len()];
    for spec in specs {
        match map.index_of(&spec.table) {
            Some(index) => {
                still_configured[index] = true;
                let comes_back = !map.is_active(index);
                if comes_back || *map.spec(index).as_ref() != spec {
                    changes.changed.push(index);
                    changes.kept.push((index, Arc::new(spec)));
                } else {
                    changes.kept.push((index, map.spec(index).clone()));
                }
            }
            None => changes.added.push(Arc::new(spec)),
        }
    }
    changes.removed = (0..map.len())
        .filter(|&index| map.is_active(index) && !still_configured[index])
        .collect();
    changes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::policy::Thresholds;

    fn spec(table: &str, min_files: u64) -> TableSpec {
        TableSpec::for_tests(
            table,
            "lake",
            &format!("{table}/"),
            Thresholds {
                small_file_bytes: 1 << 20,
                min_files,
                min_total_bytes: 1 << 30,
                max_wait_millis: None,
            },
        )
    }

    /// A map without accumulators: the plan only reads specs and flags.
    fn map_of(specs: &[TableSpec], active: &[bool]) -> TableMap<()> {
        TableMap {
            specs: specs.iter().cloned().map(Arc::new).collect(),
            active: active.to_vec(),
            accumulators: Vec::new(),
            by_name: specs
                .iter()
                .enumerate()
                .map(|(index, spec)| (spec.table.clone(), index))
                .collect(),
            tenants: BTreeMap::new(),
        }
    }

    #[test]
    fn unchanged_tables_keep_their_slot_and_spec() {
        let map = map_of(&[spec("n.a", 3), spec("n.b", 3)], &[true, true]);
        let changes = plan_changes(&map, vec![spec("n.b", 3), spec("n.a", 3)]);
        assert!(changes.added.is_empty() && changes.removed.is_empty());
        assert!(changes.changed.is_empty());
        let slots: Vec<usize> = changes.kept.iter().map(|(index, _)| *index).collect();
        assert_eq!(slots, [1, 0], "found by name, not by position");
        assert!(Arc::ptr_eq(&changes.kept[0].1, map.spec(1)));
    }

    #[test]
    fn added_changed_removed_and_returning_tables() {
        let map = map_of(
            &[spec("n.a", 3), spec("n.b", 3), spec("n.gone", 3)],
            &[true, true, false],
        );
        let changes = plan_changes(
            &map,
            vec![spec("n.a", 7), spec("n.gone", 3), spec("n.new", 3)],
        );
        assert_eq!(
            changes.changed,
            [0, 2],
            "a's threshold changed, gone comes back"
        );
        assert_eq!(changes.kept[0].1.thresholds.min_files, 7);
        assert_eq!(changes.removed, [1]);
        assert_eq!(changes.added.len(), 1);
        assert_eq!(changes.added[0].table, "n.new");
    }

    #[test]
    fn applying_keeps_indices_stable() {
        let map = map_of(&[spec("n.a", 3), spec("n.b", 3)], &[true, true]);
        let changes = plan_changes(&map, vec![spec("n.b", 4)]);
        let next = map.apply(&changes, Vec::new(), Vec::new());
        assert_eq!(next.len(), 2);
        assert!(!next.is_active(0));
        assert_eq!(
            next.index_of("n.a"),
            Some(0),
            "removed tables keep their slot"
        );
        assert_eq!(next.active_index_of("n.a"), None);
        assert_eq!(next.active_index_of("n.b"), Some(1));
        assert_eq!(next.spec(1).thresholds.min_files, 4);
        assert_eq!(next.num_active(), 1);
        let back = plan_changes(&next, vec![spec("n.a", 3), spec("n.b", 4)]);
        assert_eq!(back.changed, [0]);
        let again = next.apply(&back, Vec::new(), Vec::new());
        assert_eq!(again.active_index_of("n.a"), Some(0));
    }
}
