//! Which tables a listing shows: filtered, sorted and paged on the server from every table's
//! [`TableSummary`](crate::table::board::TableSummary), so a page of 50 out of 100,000 tables is all
//! whose full status is asked for, serialized and sent.

use serde::Deserialize;

use crate::table::board::TableSummary;

/// A table as the listing sees it: its place in the table map, its names and its summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row<'a> {
    pub index: usize,
    pub table: &'a str,
    pub tenant: &'a str,
    pub summary: TableSummary,
}

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
pub struct Page<'a> {
    pub tables: Vec<Row<'a>>,
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

    fn keeps(&self, row: &Row<'_>, needle: Option<&str>) -> bool {
        if self
            .tenant
            .as_ref()
            .is_some_and(|tenant| tenant != row.tenant)
        {
            return false;
        }
        if needle.is_some_and(|needle| !row.table.to_lowercase().contains(needle)) {
            return false;
        }
        let summary = &row.summary;
        match self.state.as_deref() {
            Some("due") => summary.due,
            Some("failing") => summary.consecutive_failures > 0,
            Some("running") => summary.running,
            Some("pending") => summary.pending_files > 0,
            _ => true,
        }
    }

    /// The page of `rows` this query asks for; [`validate`](Self::validate) it first (an
    /// unknown sort keeps the configuration's order).
    pub fn select<'a>(&self, rows: Vec<Row<'a>>) -> Page<'a> {
        let total = rows.len();
        let needle = self.q.as_ref().map(|q| q.to_lowercase());
        let mut kept: Vec<Row<'a>> = rows
            .into_iter()
            .filter(|row| self.keeps(row, needle.as_deref()))
            .collect();
        let Some(sort) = self.sort.as_deref() else {
            let matched = kept.len();
            return self.page(kept, total, matched);
        };
        let descending = match self.order.as_deref() {
            Some(order) => order == "desc",
            None => !matches!(sort, "name" | "tenant"),
        };
        let order = |a: &Row<'a>, b: &Row<'a>| {
            let (x, y) = (&a.summary, &b.summary);
            let by = match sort {
                "name" => a.table.cmp(b.table),
                "tenant" => a.tenant.cmp(b.tenant),
                "pending_files" => x.pending_files.cmp(&y.pending_files),
                "pending_bytes" => x.pending_bytes.cmp(&y.pending_bytes),
                "failures" => x.consecutive_failures.cmp(&y.consecutive_failures),
                "last_run" => x.last_run_millis.cmp(&y.last_run_millis),
                "due" => x.due.cmp(&y.due),
                _ => std::cmp::Ordering::Equal,
            };
            let by = if descending { by.reverse() } else { by };
            // Ties by name (unique in the table map), so pages never overlap.
            by.then_with(|| a.table.cmp(b.table))
        };
        let matched = kept.len();
        // Only the rows up to the page's end need an order: they are picked in linear time and
        // sorted alone (50 rows out of 100,000 instead of all of them).
        let end = self
            .limit
            .map(|limit| self.offset.unwrap_or(0).saturating_add(limit));
        if let Some(end) = end.filter(|end| *end < kept.len()) {
            kept.select_nth_unstable_by(end, order);
            kept.truncate(end);
        }
        kept.sort_unstable_by(order);
        self.page(kept, total, matched)
    }

    /// The page of `kept` (the matching rows in order, or at least those up to the page's end).
    fn page<'a>(&self, kept: Vec<Row<'a>>, total: usize, matched: usize) -> Page<'a> {
        let offset = self.offset.unwrap_or(0).min(matched);
        let tables: Vec<Row<'a>> = match self.limit {
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

    fn statuses() -> Vec<Row<'static>> {
        [
            "sales.orders",
            "sales.refunds",
            "ops.logs",
            "ops.metrics",
            "web.clicks",
        ]
        .iter()
        .enumerate()
        .map(|(n, table)| Row {
            index: n,
            table,
            tenant: table.split('.').next().unwrap(),
            summary: TableSummary {
                pending_files: n as u64 * 3,
                pending_bytes: 1000 - n as u64,
                consecutive_failures: u32::from(n == 1),
                last_run_millis: (n % 2 == 0).then_some(1_700_000_000_000 + n as i64),
                ..TableSummary::default()
            },
        })
        .collect()
    }

    fn names<'a>(page: &Page<'a>) -> Vec<&'a str> {
        page.tables.iter().map(|row| row.table).collect()
    }

    #[test]
    fn without_a_query_every_table_in_the_configurations_order_and_by_name_when_asked() {
        let all = statuses();
        let configured: Vec<&str> = all.iter().map(|row| row.table).collect();
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

    proptest::proptest! {
        /// A page picked from the rows up to its end is the page of the whole sorted list.
        #[test]
        fn a_page_is_the_same_slice_of_the_fully_sorted_tables(
            figures in proptest::collection::vec(
                (0u64..4, 0u32..3, proptest::option::of(0i64..3)),
                0..60,
            ),
            sort in proptest::sample::select(SORTS.to_vec()),
            descending in proptest::bool::ANY,
            offset in 0usize..70,
            limit in 1usize..20,
        ) {
            let tables: Vec<String> = (0..figures.len())
                .map(|n| format!("t{:02}.x{}", n * 7 % 61, n))
                .collect();
            let rows: Vec<Row<'_>> = figures
                .iter()
                .zip(&tables)
                .enumerate()
                .map(|(index, (&(files, failures, last_run), table))| Row {
                    index,
                    table,
                    tenant: &table[..3],
                    summary: TableSummary {
                        pending_files: files,
                        pending_bytes: files * 10,
                        consecutive_failures: failures,
                        last_run_millis: last_run,
                        due: files > 2,
                        ..TableSummary::default()
                    },
                })
                .collect();
            let order = if descending { "desc" } else { "asc" };
            let query = TableQuery {
                sort: Some(sort.to_string()),
                order: Some(order.to_string()),
                offset: Some(offset),
                limit: Some(limit),
                ..TableQuery::default()
            };
            let whole = TableQuery { offset: None, limit: None, ..query.clone() }.select(rows.clone());
            let page = query.select(rows);
            proptest::prop_assert_eq!(page.matched, whole.matched);
            let expected: Vec<&str> = names(&whole).into_iter().skip(offset).take(limit).collect();
            proptest::prop_assert_eq!(names(&page), expected);
        }
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
        let mut by_files: Vec<(u64, &str)> = all
            .iter()
            .map(|row| (row.summary.pending_files, row.table))
            .collect();
        by_files.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
        let page = query.select(all);
        assert_eq!(page.tables.len(), 2);
        assert_eq!(
            names(&page),
            by_files[1..3]
                .iter()
                .map(|(_, name)| *name)
                .collect::<Vec<_>>()
        );

        let failing = TableQuery {
            state: Some("failing".to_string()),
            ..TableQuery::default()
        }
        .select(statuses());
        assert_eq!(failing.matched, 1);
        assert_eq!(failing.tables[0].summary.consecutive_failures, 1);
        let last_run = TableQuery {
            sort: Some("last_run".to_string()),
            ..TableQuery::default()
        }
        .select(statuses());
        assert_eq!(
            names(&last_run)[..3],
            ["web.clicks", "ops.logs", "sales.orders"],
            "latest first; never run last"
        );

        let all = statuses();
        let tenant = all[0].tenant.to_string();
        let expected = all.iter().filter(|row| row.tenant == tenant).count();
        let needle = all[0].table[..3].to_uppercase();
        let by_tenant = TableQuery {
            tenant: Some(tenant.clone()),
            q: Some(needle.clone()),
            ..TableQuery::default()
        }
        .select(all);
        assert!(by_tenant.matched >= 1 && by_tenant.matched <= expected);
        assert!(by_tenant
            .tables
            .iter()
            .all(|row| row.tenant == tenant
                && row.table.to_lowercase().contains(&needle.to_lowercase())));
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
