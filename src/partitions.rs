//! Iceberg partitions as icepack meets them: the partition spec (read from `DESCRIBE TABLE`), the
//! `k=v/...` paths of data files, and the `where` filter that limits a rewrite to the partitions
//! worth it. Identity partitions and the time transforms (year, month, day, hour) become exact
//! predicates; any other transform (bucket, truncate, renamed fields) makes the filter fall back to
//! the whole table. Every value is quoted as a literal, every column name as an identifier.

use serde::{Deserialize, Serialize};

use crate::sql_text::quote_string;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transform {
    Identity,
    Year,
    Month,
    Day,
    Hour,
    /// bucket, truncate, void ...: no predicate is derived from it.
    Other(String),
}

/// One field of a partition spec: the name it has in data file paths, its source column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionField {
    pub name: String,
    pub source: String,
    pub transform: Transform,
}

/// Reads the `# Partitioning` section of spark-sql's `DESCRIBE TABLE` output (tab-separated,
/// padded). `None` when the output has no column header at all; an empty spec for unpartitioned.
pub fn parse_describe(stdout: &str) -> Option<Vec<PartitionField>> {
    let lines: Vec<Vec<String>> = stdout
        .lines()
        .map(|line| line.split('\t').map(str::to_string).collect())
        .collect();
    let start = lines
        .iter()
        .position(|cells| cells.first().map(|cell| cell.trim()) == Some("col_name"))?;
    Some(describe_from_rows(&lines[start + 1..]))
}

/// The partition spec from the rows of a `DESCRIBE TABLE` result (after its header), from any
/// engine: the `# Partitioning` section's `Part N` rows. Empty for an unpartitioned table.
pub fn describe_from_rows(rows: &[Vec<String>]) -> Vec<PartitionField> {
    let mut fields = Vec::new();
    let mut in_partitioning = false;
    for cells in rows {
        let first = cells.first().map(|cell| cell.trim()).unwrap_or("");
        if first == "# Partitioning" {
            in_partitioning = true;
            continue;
        }
        if in_partitioning {
            if !first.starts_with("Part ") {
                break;
            }
            let expression = cells.get(1).map(|cell| cell.trim()).unwrap_or("");
            fields.push(parse_transform(expression));
        }
    }
    fields
}

fn parse_transform(expression: &str) -> PartitionField {
    let named = |suffix: &str, source: &str, transform: Transform| PartitionField {
        name: format!("{source}_{suffix}"),
        source: source.to_string(),
        transform,
    };
    match expression.split_once('(') {
        None => PartitionField {
            name: expression.to_string(),
            source: expression.to_string(),
            transform: Transform::Identity,
        },
        Some((function, rest)) => {
            let arguments: Vec<&str> = rest
                .trim_end_matches(')')
                .split(',')
                .map(str::trim)
                .collect();
            let source = arguments.last().copied().unwrap_or("");
            match function {
                "years" | "year" => named("year", source, Transform::Year),
                "months" | "month" => named("month", source, Transform::Month),
                "days" | "day" => named("day", source, Transform::Day),
                "hours" | "hour" => named("hour", source, Transform::Hour),
                "bucket" => named("bucket", source, Transform::Other(expression.to_string())),
                "truncate" => named("trunc", source, Transform::Other(expression.to_string())),
                _ => named(function, source, Transform::Other(expression.to_string())),
            }
        }
    }
}

/// A column name as a Spark identifier: backticks, inner backticks doubled.
fn quote_identifier(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

/// Partition path values are URL-encoded by Iceberg (`+` for a space).
fn decode_value(value: &str) -> Option<String> {
    percent_encoding::percent_decode_str(&value.replace('+', " "))
        .decode_utf8()
        .ok()
        .map(|value| value.into_owned())
}

/// `[low, high)` as two literals for a time transform's value, or `None` when it is malformed.
fn time_range(transform: &Transform, value: &str) -> Option<(String, String)> {
    use chrono::{Datelike, Duration, NaiveDate, NaiveDateTime};
    let date = |text: &str| NaiveDate::parse_from_str(text, "%Y-%m-%d").ok();
    match transform {
        Transform::Year => {
            let year: i32 = value
                .parse()
                .ok()
                .filter(|year| (1..=9999).contains(year))?;
            Some((format!("{year:04}-01-01"), format!("{:04}-01-01", year + 1)))
        }
        Transform::Month => {
            let first = date(&format!("{value}-01"))?;
            let next = if first.month() == 12 {
                NaiveDate::from_ymd_opt(first.year() + 1, 1, 1)?
            } else {
                NaiveDate::from_ymd_opt(first.year(), first.month() + 1, 1)?
            };
            Some((first.to_string(), next.to_string()))
        }
        Transform::Day => {
            let day = date(value)?;
            Some((day.to_string(), (day + Duration::days(1)).to_string()))
        }
        Transform::Hour => {
            let hour =
                NaiveDateTime::parse_from_str(&format!("{value}:00:00"), "%Y-%m-%d-%H:%M:%S")
                    .ok()?;
            let format = |time: NaiveDateTime| time.format("%Y-%m-%d %H:%M:%S").to_string();
            Some((format(hour), format(hour + Duration::hours(1))))
        }
        Transform::Identity | Transform::Other(_) => None,
    }
}

/// The predicate selecting one partition path, or `None` when it cannot be expressed exactly.
pub fn partition_predicate(spec: &[PartitionField], path: &str) -> Option<String> {
    if spec.is_empty() || path.is_empty() {
        return None;
    }
    let mut terms = Vec::new();
    for segment in path.split('/') {
        let (name, raw_value) = segment.split_once('=')?;
        let field = spec.iter().find(|field| field.name == name)?;
        let value = decode_value(raw_value)?;
        let column = quote_identifier(&field.source);
        let term = match &field.transform {
            Transform::Identity if value == "null" => format!("{column} IS NULL"),
            Transform::Identity => format!("{column} = {}", quote_string(&value)),
            Transform::Other(_) => return None,
            time => {
                let (low, high) = time_range(time, &value)?;
                format!(
                    "{column} >= {} AND {column} < {}",
                    quote_string(&low),
                    quote_string(&high)
                )
            }
        };
        terms.push(term);
    }
    // Every field of the spec must be pinned, or the predicate selects more than the partition.
    if terms.len() != spec.len() {
        return None;
    }
    Some(terms.join(" AND "))
}

/// A filter selecting exactly these partitions, or `None` (compact the whole table) when any of
/// them cannot be expressed.
pub fn where_for_partitions(spec: &[PartitionField], paths: &[String]) -> Option<String> {
    if paths.is_empty() {
        return None;
    }
    let predicates: Option<Vec<String>> = paths
        .iter()
        .map(|path| partition_predicate(spec, path))
        .collect();
    let predicates = predicates?;
    Some(if predicates.len() == 1 {
        predicates.into_iter().next().unwrap()
    } else {
        predicates
            .iter()
            .map(|predicate| format!("({predicate})"))
            .collect::<Vec<_>>()
            .join(" OR ")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const DESCRIBE: &str = "col_name\tdata_type\tcomment\nid                  \tbigint              \t                    \nts                  \ttimestamp           \t                    \n                    \t                    \t                    \n# Partitioning      \t                    \t                    \nPart 0              \tdays(ts)            \t                    \nPart 1              \tregion              \t                    \nPart 2              \tmonths(d)           \t                    \nPart 3              \tbucket(4, id)       \t                    \n";

    fn field(name: &str, source: &str, transform: Transform) -> PartitionField {
        PartitionField {
            name: name.to_string(),
            source: source.to_string(),
            transform,
        }
    }

    #[test]
    fn the_spec_is_read_from_describe() {
        let spec = parse_describe(DESCRIBE).unwrap();
        assert_eq!(spec[0], field("ts_day", "ts", Transform::Day));
        assert_eq!(spec[1], field("region", "region", Transform::Identity));
        assert_eq!(spec[2], field("d_month", "d", Transform::Month));
        assert_eq!(spec[3].name, "id_bucket");
        assert!(matches!(spec[3].transform, Transform::Other(_)));
        assert_eq!(
            parse_describe("col_name\tdata_type\tcomment\nid\tbigint\t\n"),
            Some(Vec::new())
        );
        assert_eq!(parse_describe("nothing"), None);
    }

    #[test]
    fn identity_and_time_partitions_become_exact_predicates() {
        let spec = vec![
            field("ts_day", "ts", Transform::Day),
            field("region", "region", Transform::Identity),
        ];
        assert_eq!(
            partition_predicate(&spec, "ts_day=2024-05-31/region=eu+west").unwrap(),
            "`ts` >= '2024-05-31' AND `ts` < '2024-06-01' AND `region` = 'eu west'"
        );
        let hours = vec![field("ts_hour", "ts", Transform::Hour)];
        assert_eq!(
            partition_predicate(&hours, "ts_hour=2024-05-31-23").unwrap(),
            "`ts` >= '2024-05-31 23:00:00' AND `ts` < '2024-06-01 00:00:00'"
        );
        let months = vec![field("d_month", "d", Transform::Month)];
        assert_eq!(
            partition_predicate(&months, "d_month=2024-12").unwrap(),
            "`d` >= '2024-12-01' AND `d` < '2025-01-01'"
        );
        let years = vec![field("d_year", "d", Transform::Year)];
        assert_eq!(
            partition_predicate(&years, "d_year=2024").unwrap(),
            "`d` >= '2024-01-01' AND `d` < '2025-01-01'"
        );
        let identity = vec![field("order_date", "order_date", Transform::Identity)];
        assert_eq!(
            partition_predicate(&identity, "order_date=null").unwrap(),
            "`order_date` IS NULL"
        );
        assert_eq!(
            where_for_partitions(
                &identity,
                &[
                    "order_date=2024-05-01".to_string(),
                    "order_date=2024-05-02".to_string()
                ]
            )
            .unwrap(),
            "(`order_date` = '2024-05-01') OR (`order_date` = '2024-05-02')"
        );
    }

    #[test]
    fn what_cannot_be_expressed_falls_back_to_the_whole_table() {
        let spec = vec![field(
            "id_bucket",
            "id",
            Transform::Other("bucket(4, id)".to_string()),
        )];
        assert_eq!(partition_predicate(&spec, "id_bucket=3"), None);
        let spec = vec![
            field("ts_day", "ts", Transform::Day),
            field("region", "region", Transform::Identity),
        ];
        assert_eq!(
            partition_predicate(&spec, "ts_day=2024-05-01"),
            None,
            "a field left unpinned"
        );
        assert_eq!(
            partition_predicate(&spec, "renamed=2024-05-01/region=eu"),
            None
        );
        assert_eq!(
            partition_predicate(&spec, "ts_day=yesterday/region=eu"),
            None,
            "malformed time value"
        );
        assert_eq!(where_for_partitions(&spec, &[]), None);
        assert_eq!(partition_predicate(&[], "x=1"), None, "no spec known yet");
    }

    #[test]
    fn hostile_values_and_names_stay_quoted() {
        let spec = vec![field("region", "reg`ion", Transform::Identity)];
        let predicate = partition_predicate(&spec, "region=eu%27%29%20OR%201%3D1%20--").unwrap();
        assert_eq!(predicate, r"`reg``ion` = 'eu\') OR 1=1 --'");
        let predicate = partition_predicate(
            &[field("r", "r", Transform::Identity)],
            "r=%5C%27%3B%0ADROP",
        )
        .unwrap();
        assert_eq!(predicate, r"`r` = '\\\';\nDROP'");
    }

    proptest! {
        #[test]
        fn any_identity_value_is_one_literal(value in "\\PC{0,40}") {
            let spec = vec![field("p", "p", Transform::Identity)];
            let encoded = percent_encoding::utf8_percent_encode(&value, percent_encoding::NON_ALPHANUMERIC).to_string();
            if let Some(predicate) = partition_predicate(&spec, &format!("p={encoded}")) {
                if value != "null" {
                    prop_assert_eq!(predicate, format!("`p` = {}", quote_string(&value)));
                }
            }
        }
    }
}
