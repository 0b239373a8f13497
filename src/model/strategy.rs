//! How a run rewrites a table's files: bin-pack, sort, z-order, or — `auto`, as S3 Tables
//! does — sort when the table has a sort order and bin-pack otherwise. A sort order given in the
//! configuration is parsed here into columns and directions, so nothing but column names, `ASC`,
//! `DESC` and `NULLS FIRST|LAST` ever reaches the SQL.

use serde::{Deserialize, Serialize};

use crate::base::sql_text::is_safe_identifier;

/// A table's rewrite strategy, as configured (`strategy`, `sort_order`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Strategy {
    Binpack,
    /// `None`: the table's own sort order (the run fails if it has none).
    Sort(Option<SortOrder>),
    /// Interleaved ordering of these columns.
    Zorder(Vec<String>),
    /// Sort by the table's own order when it has one, bin-pack otherwise.
    Auto,
}

/// The strategy names `strategy` accepts.
pub const STRATEGY_NAMES: [&str; 4] = ["binpack", "sort", "zorder", "auto"];

/// `col1 DESC NULLS LAST, col2`: columns with their directions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SortOrder(Vec<SortTerm>);

#[derive(Debug, Clone, PartialEq, Eq)]
struct SortTerm {
    column: String,
    descending: Option<bool>,
    nulls_last: Option<bool>,
}

/// The table's own sort order, as the last read of its metadata found it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TableOrder {
    Unsorted,
    /// Iceberg's description of it (`id ASC NULLS FIRST`), for status only.
    Sorted(String),
}

/// What one run does: decided when the run is claimed, kept with its claim and its record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStrategy {
    #[default]
    Binpack,
    /// `sort_order => ...` (`None`: the table's own order).
    Sort(Option<String>),
    /// `sort_order => 'zorder(...)'`.
    Zorder(Vec<String>),
}

impl Strategy {
    /// The strategy named `name` with the table's `sort_order`, or why they do not go together.
    pub fn parse(name: &str, sort_order: Option<&str>) -> Result<Strategy, String> {
        match (name, sort_order) {
            ("binpack", None) => Ok(Strategy::Binpack),
            ("auto", None) => Ok(Strategy::Auto),
            ("sort", None) => Ok(Strategy::Sort(None)),
            ("zorder", None) => Err(
                "strategy = \"zorder\" needs sort_order, the columns to interleave: \"zorder(a, b)\""
                    .to_string(),
            ),
            ("sort" | "zorder", Some(order)) => match (zorder_columns(order), name) {
                (Some(columns), _) => Ok(Strategy::Zorder(columns?)),
                (None, "zorder") => Ok(Strategy::Zorder(column_list(order)?)),
                (None, _) => Ok(Strategy::Sort(Some(SortOrder::parse(order)?))),
            },
            ("binpack" | "auto", Some(_)) => Err(format!(
                "sort_order needs strategy = \"sort\" or \"zorder\" (strategy is \"{name}\")"
            )),
            (other, _) => Err(format!(
                "strategy must be one of {}, got `{}`",
                STRATEGY_NAMES.join(", "),
                other.escape_debug()
            )),
        }
    }

    /// What a run does given the table's order as last read; `None` when that is needed and
    /// not known yet (`auto` on a table never read).
    pub fn for_run(&self, table_order: Option<&TableOrder>) -> Option<RunStrategy> {
        Some(match self {
            Strategy::Binpack => RunStrategy::Binpack,
            Strategy::Sort(order) => RunStrategy::Sort(order.as_ref().map(SortOrder::to_sql)),
            Strategy::Zorder(columns) => RunStrategy::Zorder(columns.clone()),
            Strategy::Auto => match table_order? {
                TableOrder::Unsorted => RunStrategy::Binpack,
                TableOrder::Sorted(_) => RunStrategy::Sort(None),
            },
        })
    }

    pub fn name(&self) -> &'static str {
        match self {
            Strategy::Binpack => "binpack",
            Strategy::Sort(_) => "sort",
            Strategy::Zorder(_) => "zorder",
            Strategy::Auto => "auto",
        }
    }
}

impl RunStrategy {
    /// `binpack`, `sort` or `zorder`: for status, notifications and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            RunStrategy::Binpack => "binpack",
            RunStrategy::Sort(_) => "sort",
            RunStrategy::Zorder(_) => "zorder",
        }
    }

    /// `rewrite_data_files`' `strategy` and, for a sort, its `sort_order` (unquoted).
    pub fn procedure_arguments(&self) -> (&'static str, Option<String>) {
        match self {
            RunStrategy::Binpack => ("binpack", None),
            RunStrategy::Sort(order) => ("sort", order.clone()),
            RunStrategy::Zorder(columns) => {
                ("sort", Some(format!("zorder({})", columns.join(", "))))
            }
        }
    }
}

impl SortOrder {
    /// Its terms as (column, descending, nulls last), with Spark's defaults where the text says
    /// nothing: ascending, and nulls first when ascending, last when descending.
    pub fn terms(&self) -> impl Iterator<Item = (&str, bool, bool)> {
        self.0.iter().map(|term| {
            let descending = term.descending.unwrap_or(false);
            (
                term.column.as_str(),
                descending,
                term.nulls_last.unwrap_or(descending),
            )
        })
    }

    /// `col [ASC|DESC] [NULLS FIRST|NULLS LAST], ...`; columns may be nested (`a.b`).
    pub fn parse(text: &str) -> Result<SortOrder, String> {
        let terms = split_terms(text)?
            .into_iter()
            .map(|term| {
                let words: Vec<String> = term
                    .split_whitespace()
                    .map(str::to_ascii_uppercase)
                    .collect();
                let column = term.split_whitespace().next().unwrap_or_default();
                check_column(column)?;
                let rest: Vec<&str> = words[1..].iter().map(String::as_str).collect();
                let (descending, nulls) = match rest.as_slice() {
                    [] => (None, &[][..]),
                    ["ASC", nulls @ ..] => (Some(false), nulls),
                    ["DESC", nulls @ ..] => (Some(true), nulls),
                    nulls => (None, nulls),
                };
                let nulls_last = match nulls {
                    [] => None,
                    ["NULLS", "FIRST"] => Some(false),
                    ["NULLS", "LAST"] => Some(true),
                    _ => {
                        return Err(format!(
                            "sort_order: `{}` is not `column [ASC|DESC] [NULLS FIRST|NULLS LAST]`",
                            term.escape_debug()
                        ))
                    }
                };
                Ok(SortTerm {
                    column: column.to_string(),
                    descending,
                    nulls_last,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(SortOrder(terms))
    }

    /// The order as `rewrite_data_files` reads it: `id DESC NULLS LAST, ts`.
    pub fn to_sql(&self) -> String {
        self.0
            .iter()
            .map(|term| {
                let mut text = term.column.clone();
                match term.descending {
                    Some(true) => text.push_str(" DESC"),
                    Some(false) => text.push_str(" ASC"),
                    None => {}
                }
                match term.nulls_last {
                    Some(true) => text.push_str(" NULLS LAST"),
                    Some(false) => text.push_str(" NULLS FIRST"),
                    None => {}
                }
                text
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The columns of `zorder(a, b)` (any case), or `None` when `text` is not a z-order.
fn zorder_columns(text: &str) -> Option<Result<Vec<String>, String>> {
    let trimmed = text.trim();
    let head = trimmed.get(..6)?;
    if !head.eq_ignore_ascii_case("zorder") {
        return None;
    }
    let inner = trimmed[6..].trim_start();
    let inner = inner
        .strip_prefix('(')
        .and_then(|rest| rest.strip_suffix(')'));
    Some(match inner {
        Some(inner) => column_list(inner),
        None => Err(format!(
            "sort_order: `{}` is not `zorder(column, ...)`",
            text.escape_debug()
        )),
    })
}

/// `a, b.c`: at least one column name, no directions.
fn column_list(text: &str) -> Result<Vec<String>, String> {
    let columns = split_terms(text)?;
    for column in &columns {
        check_column(column)?;
    }
    Ok(columns)
}

fn split_terms(text: &str) -> Result<Vec<String>, String> {
    if text.len() > 1024 || text.chars().any(char::is_control) {
        return Err("sort_order: must be one line of at most 1024 characters".to_string());
    }
    let terms: Vec<String> = text
        .split(',')
        .map(|term| term.trim().to_string())
        .collect();
    if terms.iter().any(String::is_empty) {
        return Err(format!(
            "sort_order: `{}` has an empty term; give columns separated by commas",
            text.escape_debug()
        ));
    }
    Ok(terms)
}

/// A column name, nested fields joined by dots; each part a plain identifier.
fn check_column(column: &str) -> Result<(), String> {
    if column.split('.').all(is_safe_identifier) {
        Ok(())
    } else {
        Err(format!(
            "sort_order: `{}` is not a column name (letters, digits and `_`, nested fields with `.`)",
            column.escape_debug()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sort_orders_are_parsed_and_written_back_in_canonical_form() {
        let order = SortOrder::parse("  event_ts desc nulls last ,id,  user.region ASC ").unwrap();
        assert_eq!(
            order.to_sql(),
            "event_ts DESC NULLS LAST, id, user.region ASC"
        );
        assert_eq!(
            SortOrder::parse("a NULLS FIRST").unwrap().to_sql(),
            "a NULLS FIRST"
        );
    }

    #[test]
    fn anything_but_columns_and_directions_is_refused() {
        for bad in [
            "",
            "a,,b",
            "a DESC DESC",
            "a NULLS",
            "a DOWN",
            "bucket(4, id)",
            "a'; DROP TABLE t; --",
            "a\nb",
            "1a",
            "a..b",
        ] {
            assert!(SortOrder::parse(bad).is_err(), "`{bad}` was accepted");
        }
    }

    #[test]
    fn strategies_and_sort_orders_go_together_or_are_refused() {
        assert_eq!(Strategy::parse("binpack", None), Ok(Strategy::Binpack));
        assert_eq!(Strategy::parse("auto", None), Ok(Strategy::Auto));
        assert_eq!(Strategy::parse("sort", None), Ok(Strategy::Sort(None)));
        assert_eq!(
            Strategy::parse("zorder", Some("zorder(a, b.c)")),
            Ok(Strategy::Zorder(vec!["a".into(), "b.c".into()]))
        );
        assert_eq!(
            Strategy::parse("zorder", Some("a,b")),
            Ok(Strategy::Zorder(vec!["a".into(), "b".into()]))
        );
        // Iceberg's own spelling of a z-order is a sort order `zorder(...)`.
        assert_eq!(
            Strategy::parse("sort", Some("ZORDER (x, y)")),
            Ok(Strategy::Zorder(vec!["x".into(), "y".into()]))
        );
        for (name, order) in [
            ("binpack", Some("a")),
            ("auto", Some("a")),
            ("zorder", None),
            ("zorder", Some("zorder(a DESC)")),
            ("zorder", Some("zorder(a")),
            ("Sort", None),
            ("rewrite", None),
        ] {
            assert!(
                Strategy::parse(name, order).is_err(),
                "{name} with {order:?} was accepted"
            );
        }
    }

    #[test]
    fn auto_sorts_a_sorted_table_and_needs_the_order_read_first() {
        let auto = Strategy::Auto;
        assert_eq!(auto.for_run(None), None);
        assert_eq!(
            auto.for_run(Some(&TableOrder::Unsorted)),
            Some(RunStrategy::Binpack)
        );
        assert_eq!(
            auto.for_run(Some(&TableOrder::Sorted("id ASC NULLS FIRST".into()))),
            Some(RunStrategy::Sort(None))
        );
        let sort = Strategy::parse("sort", Some("id desc")).unwrap();
        assert_eq!(
            sort.for_run(None),
            Some(RunStrategy::Sort(Some("id DESC".into())))
        );
        assert_eq!(
            RunStrategy::Zorder(vec!["a".into(), "b".into()]).procedure_arguments(),
            ("sort", Some("zorder(a, b)".to_string()))
        );
    }
}
