//! `[metrics]`: which tables have series of their own on `/metrics`. Every tenant's aggregates
//! are always exported; a table's own series are opt-in, so that the exposition stays bounded
//! by the tenants, not the fleet (six gauges and a few counters a table would make 600,000
//! series at 100,000 tables).

use super::*;

/// Tables listed with this name have their own series: all of them.
pub const ALL_TABLES: &str = "*";

/// `[metrics]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// Tables (exact names) whose counters and gauges are exported with a `table` label; `"*"`:
    /// every table. The others' counts are in their tenant's series (no `table` label).
    #[serde(default)]
    pub tables: Vec<String>,
    /// Besides those, the gauges of the N tables doing worst at each scrape (failing runs in a
    /// row first, then pending files); 0: none.
    #[serde(default)]
    pub worst_tables: Int<0, 1_000>,
}

impl MetricsConfig {
    /// Every listed name is `"*"` or a configured table.
    pub(super) fn validate(&self, tables: &[TableConfig]) -> Result<(), ConfigError> {
        let configured: HashSet<&str> = tables.iter().map(|table| table.table.as_str()).collect();
        for (index, name) in self.tables.iter().enumerate() {
            if name != ALL_TABLES && !configured.contains(name.as_str()) {
                return invalid(format!(
                    "metrics.tables[{index}]: `{name}` is not a configured table (list tables by their `table`, or \"*\" for all)"
                ));
            }
        }
        Ok(())
    }

    /// Whether every table has its own series.
    pub fn all_tables(&self) -> bool {
        self.tables.iter().any(|name| name == ALL_TABLES)
    }
}
