//! Which tables have series of their own (`[metrics]`), and what a tenant's aggregates add up:
//! pure decisions, applied where counters are incremented and where a scrape encodes gauges.

use std::collections::{BTreeMap, HashSet};

use crate::config::{Config, ALL_TABLES};

use super::TableGauges;

/// The tables with series of their own: listed ones, or all; plus, for the gauges read at a
/// scrape, the `worst` tables of that scrape.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableSeries {
    pub(super) all: bool,
    pub(super) tables: HashSet<String>,
    pub(super) worst: usize,
}

impl TableSeries {
    pub fn from_config(config: &Config) -> Self {
        let metrics = &config.metrics;
        TableSeries {
            all: metrics.all_tables(),
            tables: metrics
                .tables
                .iter()
                .filter(|name| name.as_str() != ALL_TABLES)
                .cloned()
                .collect(),
            worst: metrics.worst_tables.get() as usize,
        }
    }

    /// Every table with its own series (icepack before `[metrics]`, and tests).
    pub fn every_table() -> Self {
        TableSeries {
            all: true,
            ..TableSeries::default()
        }
    }

    /// Whether the table's counters carry its name (else they count into its tenant's series).
    pub fn own(&self, table: &str) -> bool {
        self.all || self.tables.contains(table)
    }

    /// The tables whose gauges this scrape exports: the listed ones, then the `worst` of the
    /// rest (failing runs in a row, then pending files, then pending bytes; ties by name).
    pub fn pick<'a>(&self, tables: &'a [TableGauges]) -> Vec<&'a TableGauges> {
        let mut picked: Vec<&TableGauges> = Vec::new();
        let mut rest: Vec<&TableGauges> = Vec::new();
        for table in tables {
            if self.own(&table.table) {
                picked.push(table);
            } else if self.worst > 0
                && table.pending_files + u64::from(table.consecutive_failures) > 0
            {
                rest.push(table);
            }
        }
        if rest.len() > self.worst {
            let key = |table: &TableGauges| {
                (
                    std::cmp::Reverse(table.consecutive_failures),
                    std::cmp::Reverse(table.pending_files),
                    std::cmp::Reverse(table.pending_bytes),
                )
            };
            rest.select_nth_unstable_by(self.worst - 1, |a, b| {
                key(a).cmp(&key(b)).then_with(|| a.table.cmp(&b.table))
            });
            rest.truncate(self.worst);
        }
        picked.extend(rest);
        picked
    }
}

/// One tenant's tables added up at a scrape.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TenantGauges {
    pub tables: u64,
    pub pending_files: u64,
    pub pending_bytes: u64,
    pub tables_due: u64,
    pub runs_in_flight: u64,
    /// Tables whose last run failed (one failure or more in a row).
    pub tables_failing: u64,
}

/// Every tenant's sums, by tenant.
pub fn by_tenant(tables: &[TableGauges]) -> BTreeMap<&str, TenantGauges> {
    let mut tenants: BTreeMap<&str, TenantGauges> = BTreeMap::new();
    for table in tables {
        let tenant = tenants.entry(table.tenant.as_str()).or_default();
        tenant.tables += 1;
        tenant.pending_files = tenant.pending_files.saturating_add(table.pending_files);
        tenant.pending_bytes = tenant.pending_bytes.saturating_add(table.pending_bytes);
        tenant.tables_due += u64::from(table.due);
        tenant.runs_in_flight += u64::from(table.run_in_flight);
        tenant.tables_failing += u64::from(table.consecutive_failures > 0);
    }
    tenants
}
