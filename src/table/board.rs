//! What the listing, `/v1/tenants` and `/metrics` need of every table, kept where they read it
//! without asking every table's accumulator: each accumulator publishes its table's
//! [`TableSummary`] whenever it evaluates the table (after every committed change and at every
//! timer), and remains the only writer of the table's state. A page of the listing then asks
//! only its own tables' accumulators for their full status.

use std::collections::HashMap;
use std::sync::{PoisonError, RwLock};

use crate::model::state::TableSnapshot;

/// A table's figures as its accumulator last evaluated them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TableSummary {
    pub pending_files: u64,
    pub pending_bytes: u64,
    pub due: bool,
    /// A run holds a claim on the table's files.
    pub running: bool,
    pub consecutive_failures: u32,
    /// When its last run finished (Unix millis).
    pub last_run_millis: Option<i64>,
}

impl TableSummary {
    /// The table's figures, `due` as its accumulator decided it.
    pub fn of(snapshot: &TableSnapshot, due: bool) -> Self {
        let state = &snapshot.state;
        TableSummary {
            pending_files: state.pending.files,
            pending_bytes: state.pending.bytes,
            due,
            running: state.claim.is_some(),
            consecutive_failures: state.consecutive_failures,
            last_run_millis: state.last_run.as_ref().map(|run| run.finished_millis),
        }
    }
}

/// Every table's latest summary, by table name. A table that has not published yet (its
/// accumulator is starting) reads as an empty summary; a removed table's entry is left until
/// the name is configured again, and nothing lists it meanwhile (readers go by the table map).
#[derive(Debug, Default)]
pub struct StatusBoard {
    tables: RwLock<HashMap<String, TableSummary>>,
}

impl StatusBoard {
    /// Records a table's summary; a summary equal to the one kept takes no write lock.
    pub fn publish(&self, table: &str, summary: TableSummary) {
        let unchanged = self
            .tables
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(table)
            .is_some_and(|kept| *kept == summary);
        if unchanged {
            return;
        }
        let mut tables = self.tables.write().unwrap_or_else(PoisonError::into_inner);
        match tables.get_mut(table) {
            Some(kept) => *kept = summary,
            None => {
                tables.insert(table.to_string(), summary);
            }
        }
    }

    /// The summaries of `tables`, in their order, under one read lock.
    pub fn read<'a, T>(
        &self,
        tables: impl IntoIterator<Item = (T, &'a str)>,
    ) -> Vec<(T, TableSummary)> {
        let kept = self.tables.read().unwrap_or_else(PoisonError::into_inner);
        tables
            .into_iter()
            .map(|(item, table)| (item, kept.get(table).copied().unwrap_or_default()))
            .collect()
    }

    /// One table's summary (empty when it has not published).
    pub fn get(&self, table: &str) -> TableSummary {
        self.tables
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(table)
            .copied()
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_get_the_latest_summary_and_an_empty_one_before_the_first() {
        let board = StatusBoard::default();
        let busy = TableSummary {
            pending_files: 12,
            pending_bytes: 1_200,
            due: true,
            ..TableSummary::default()
        };
        board.publish("a.busy", busy);
        board.publish(
            "a.busy",
            TableSummary {
                running: true,
                ..busy
            },
        );
        let read = board.read([(0, "a.busy"), (1, "a.new")]);
        assert_eq!(read[0].0, 0);
        assert!(read[0].1.running && read[0].1.pending_files == 12);
        assert_eq!(read[1].1, TableSummary::default());
        assert_eq!(board.get("a.busy"), read[0].1);
    }
}
