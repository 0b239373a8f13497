//! Which tables a listing shows: filtered, sorted and paged on the server, so a page of 50 out of
//! 10,000 tables is all that is serialized and sent.

use serde::Deserialize;

use crate::status::TableStatus;

/// The query string of `GET /v1/tables` (every part optional; none: every table, in the
/// configuration's order).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableQuery {
    /// Only this tenant's tables.
    pub tenant: Option<String>,
    /// Only tables whose name contains this (case-insensitive).
    pub q: Option<String>,
    /// `due`, `failing`, `running`, `pending` (any small file waiting) or `all`.
    pub state: Option<String>,
    /// `name`, `tenant`, `pending_files`, `pending_bytes`, `failures`, `last_run` or `due`
    /// (none: the configuration's order, as before there were queries).
    pub sort: Option<String>,
    /// `asc` or `desc` (default: `asc` by name and tenant, `desc` by the numbers).
    pub order: Option<String>,
    pub offset: Option<usize>,
    /// At most [`MAX_LIMIT`] tables a page.
    pub limit: Option<usize>,
}

pub const MAX_LIMIT: usize = 1000;

const STATES: [&str; 5] = ["all", "due", "failing", "running", "pending"];
const SORTS: [&str; 7] = [
    "name",
    "tenant",
    "pending_files",
    "pending_bytes",
    "failures",
    "last_run",
    "due",
];

/// One page of tables and how many matched.
#[derive(Debug)]
pub struct Page {
    pub tables: Vec<TableStatus>,
    /// Tables matching the filters, across all pages.
    pub matched: usize,
    /// Every table listed before filtering.
    pub total: usize,
    pub offset: usize,
    pub limit: Option<usize>,
}

impl TableQuery {
    /// Refuses what it does not know, naming what it does.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(state) = &self.state {
            if !STATES.contains(&state.as_str()) {
                return Err(format!(
                    "state `{}` is not one of {}",
                    state.escape_debug(),
                    STATES.join(", ")
                ));
            }
        }
        if let Some(sort) = &self.sort {
            if !SORTS.contains(&sort.as_str()) {
                return Err(format!(
                    "sort `{}` is not one of {}",
                    sort.escape_debug(),
                    SORTS.join(", ")
                ));
            }
        }
        if let Some(order) = &self.order {
            if order != "asc" && order != "desc" {
                return Err(format!(
                    "order `{}` is not asc or desc",
                    order.escape_debug()
                ));
            }
        }
        if self.limit == Some(0) || self.limit.is_some_and(|limit| limit > MAX_LIMIT) {
            return Err(format!("limit must be between 1 and {MAX_LIMIT}"));
        }
        Ok(())
    }

    fn keeps(&self, status: &TableStatus, needle: Option<&str>) -> bool {
        if self
            .tenant
            .as_ref()
            .is_some_and(|tenant| *tenant != status.tenant)
        {
            return false;
        }
        if needle.is_some_and(|needle| !status.table.to_lowercase().contains(needle)) {
            return false;
        }
        match self.state.as_deref() {
            Some("due") => status.due,
            Some("failing") => status.consecutive_failures > 0,
            Some("running") => status.in_flight_run.is_some(),
            Some("pending") => status.pending_files > 0,
            _ => true,
        }
    }

    /// The page of `statuses` this query asks for; [`validate`](Self::validate) it first (an
    /// unknown sort keeps the configuration's order).
    pub fn select(&self, statuses: Vec<TableStatus>) -> Page {
        let total = statuses.len();
        let needle = self.q.as_ref().map(|q| q.to_lowercase());
        let mut kept: Vec<TableStatus> = statuses
            .into_iter()
            .filter(|status| self.keeps(status, needle.as_deref()))
            .collect();
        let Some(sort) = self.sort.as_deref() else {
            return self.page(kept, total);
        };
        let descending = match self.order.as_deref() {
            Some(order) => order == "desc",
            None => !matches!(sort, "name" | "tenant"),
        };
        let last_run = |status: &TableStatus| {
            status
                .last_run
                .as_ref()
                .map(|run| run.finished_at.clone())
                .unwrap_or_default()
        };
        kept.sort_by(|a, b| {
            let by = match sort {
                "name" => a.table.cmp(&b.table),
                "tenant" => a.tenant.cmp(&b.tenant),
                "pending_files" => a.pending_files.cmp(&b.pending_files),
                "pending_bytes" => a.pending_bytes.cmp(&b.pending_bytes),
                "failures" => a.consecutive_failures.cmp(&b.consecutive_failures),
                "last_run" => last_run(a).cmp(&last_run(b)),
                "due" => a.due.cmp(&b.due),
                _ => std::cmp::Ordering::Equal,
            };
            let by = if descending { by.reverse() } else { by };
            // Ties by name, so pages never overlap.
            by.then_with(|| a.table.cmp(&b.table))
        });
        self.page(kept, total)
    }

    fn page(&self, kept: Vec<TableStatus>, total: usize) -> Page {
        let matched = kept.len();
        let offset = self.offset.unwrap_or(0).min(matched);
        let tables: Vec<TableStatus> = match self.limit {
            Some(limit) => kept.into_iter().skip(offset).take(limit).collect(),
            None => kept.into_iter().skip(offset).collect(),
        };
        Page {
            tables,
            matched,
            total,
            offset,
            limit: self.limit,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TableSpec;
    use crate::status::table_status;

    fn statuses() -> Vec<TableStatus> {
        let thresholds = crate::policy::Thresholds {
            small_file_bytes: 64 << 20,
            min_files: 10,
            min_total_bytes: 256 << 20,
            max_wait_millis: None,
        };
        [
            "sales.orders",
            "sales.refunds",
            "ops.logs",
            "ops.metrics",
            "web.clicks",
        ]
        .iter()
        .enumerate()
        .map(|(n, table)| {
            let mut spec = TableSpec::for_tests(table, "lake", table, thresholds);
            spec.tenant = table.split('.').next().unwrap().to_string();
            let mut snapshot = crate::state::TableSnapshot::default();
            snapshot.state.pending.files = n as u64 * 3;
            snapshot.state.pending.bytes = 1000 - n as u64;
            snapshot.state.consecutive_failures = u32::from(n == 1);
            table_status(&spec, &snapshot, 1_700_000_000_000)
        })
        .collect()
    }

    fn names(page: &Page) -> Vec<&str> {
        page.tables
            .iter()
            .map(|status| status.table.as_str())
            .collect()
    }

    #[test]
    fn without_a_query_every_table_in_the_configurations_order_and_by_name_when_asked() {
        let all = statuses();
        let configured: Vec<String> = all.iter().map(|status| status.table.clone()).collect();
        let page = TableQuery::default().select(all);
        assert_eq!(page.matched, configured.len());
        assert_eq!(names(&page), configured);
        let by_name = TableQuery {
            sort: Some("name".to_string()),
            ..TableQuery::default()
        }
        .select(statuses());
        let mut sorted = configured.clone();
        sorted.sort();
        assert_eq!(names(&by_name), sorted);
        assert_ne!(sorted, configured, "the fixture is not in name order");
    }

    #[test]
    fn filters_sort_and_page_together() {
        let query = TableQuery {
            sort: Some("pending_files".to_string()),
            limit: Some(2),
            offset: Some(1),
            ..TableQuery::default()
        };
        let all = statuses();
        let mut by_files: Vec<(u64, String)> = all
            .iter()
            .map(|status| (status.pending_files, status.table.clone()))
            .collect();
        by_files.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let page = query.select(all);
        assert_eq!(page.tables.len(), 2);
        assert_eq!(
            names(&page),
            by_files[1..3]
                .iter()
                .map(|(_, name)| name.as_str())
                .collect::<Vec<_>>()
        );

        let failing = TableQuery {
            state: Some("failing".to_string()),
            ..TableQuery::default()
        }
        .select(statuses());
        assert_eq!(failing.matched, 1);
        assert_eq!(failing.tables[0].consecutive_failures, 1);

        let all = statuses();
        let tenant = all[0].tenant.clone();
        let expected = all.iter().filter(|status| status.tenant == tenant).count();
        let needle = all[0].table[..3].to_uppercase();
        let by_tenant = TableQuery {
            tenant: Some(tenant.clone()),
            q: Some(needle.clone()),
            ..TableQuery::default()
        }
        .select(all);
        assert!(by_tenant.matched >= 1 && by_tenant.matched <= expected);
        assert!(by_tenant.tables.iter().all(|status| status.tenant == tenant
            && status.table.to_lowercase().contains(&needle.to_lowercase())));
    }

    #[test]
    fn unknown_values_are_refused_with_the_known_ones() {
        let bad = |query: TableQuery| query.validate().unwrap_err();
        assert!(bad(TableQuery {
            state: Some("broken".to_string()),
            ..TableQuery::default()
        })
        .contains("due, failing"));
        assert!(bad(TableQuery {
            sort: Some("size".to_string()),
            ..TableQuery::default()
        })
        .contains("pending_files"));
        assert!(bad(TableQuery {
            limit: Some(0),
            ..TableQuery::default()
        })
        .contains("between 1 and"));
    }
}
