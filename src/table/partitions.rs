//! Iceberg partitions as icepack meets them: the partition spec (read from `DESCRIBE TABLE`, with
//! its source columns' types), the `k=v/...` paths of data files, and the `where` filters that
//! limit a rewrite to the partitions worth it.
//!
//! A path comes from an object key, so its values are anyone's: each is parsed totally. A value
//! that a literal expresses exactly — of an identity partition on a string, integer, boolean,
//! decimal, date or timestamp column, of a year, month, day or hour within years 1 to 9999, or
//! null — pins its field; any other (bucket, truncate, a float, an unknown column or type, a year
//! past 9999, a value that is not UTF-8) leaves its field out of the predicate. A predicate is
//! never narrower than its partition — a narrower one would leave files out, a wider one only
//! rewrites more. Every value is quoted as a literal, every column name as an identifier.

use std::collections::{BTreeMap, HashSet};

use crate::base::sql_text::quote_string;

pub use crate::model::partition::{PartitionField, Transform};

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
/// engine: the columns and their types (the rows before the first blank or `#` row), then the
/// partitioning. Spark prints a spec of identity fields only as `# Partition Information`, a
/// `# col_name` header and one row per column; any other spec as `# Partitioning` and one
/// `Part N` row per field. Empty for an unpartitioned table.
pub fn describe_from_rows(rows: &[Vec<String>]) -> Vec<PartitionField> {
    #[derive(PartialEq)]
    enum Section {
        Columns,
        Other,
        PartitionColumns,
        Partitioning,
    }
    let mut columns: BTreeMap<&str, &str> = BTreeMap::new();
    let mut section = Section::Columns;
    let mut fields = Vec::new();
    for cells in rows {
        let first = cells.first().map(|cell| cell.trim()).unwrap_or("");
        let second = cells.get(1).map(|cell| cell.trim()).unwrap_or("");
        match first {
            "# Partition Information" => {
                section = Section::PartitionColumns;
                continue;
            }
            "# Partitioning" => {
                section = Section::Partitioning;
                continue;
            }
            "# col_name" if section == Section::PartitionColumns => continue,
            _ => {}
        }
        let field = match section {
            Section::Columns if !first.is_empty() && !first.starts_with('#') => {
                columns.entry(first).or_insert(second);
                continue;
            }
            Section::PartitionColumns if !first.is_empty() && !first.starts_with('#') => {
                PartitionField {
                    name: first.to_string(),
                    source: first.to_string(),
                    transform: Transform::Identity,
                    source_type: None,
                }
            }
            Section::Partitioning if first.starts_with("Part ") => parse_transform(second),
            Section::Columns => {
                section = Section::Other;
                continue;
            }
            Section::Other => continue,
            Section::PartitionColumns | Section::Partitioning => break,
        };
        fields.push(PartitionField {
            // Only a top-level column's type is known; a nested source is no column to quote.
            source_type: columns
                .get(field.source.as_str())
                .filter(|data_type| !data_type.is_empty())
                .map(|data_type| data_type.to_ascii_lowercase()),
            ..field
        });
    }
    fields
}

fn parse_transform(expression: &str) -> PartitionField {
    let named = |suffix: &str, source: &str, transform: Transform| PartitionField {
        name: format!("{source}_{suffix}"),
        source: source.to_string(),
        transform,
        source_type: None,
    };
    match expression.split_once('(') {
        None => PartitionField {
            name: expression.to_string(),
            source: expression.to_string(),
            transform: Transform::Identity,
            source_type: None,
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

/// How Hive-style layouts (and files added from them) name a null partition value.
const HIVE_NULL: &str = "__HIVE_DEFAULT_PARTITION__";

/// What a path value may stand for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum PathValue {
    Null,
    Text(String),
}

/// Every value a raw path value may stand for. Iceberg URL-encodes values (`+` for a space,
/// `%2B` for `+`) and writes null as `null` — as it writes the string `null`; files added from a
/// Hive-style layout keep `+` as it is and name null [`HIVE_NULL`]. `None` when one reading is
/// not UTF-8: no literal can express it.
fn path_values(raw: &str) -> Option<Vec<PathValue>> {
    let decode = |text: &str| {
        percent_encoding::percent_decode_str(text)
            .decode_utf8()
            .ok()
            .map(|value| value.into_owned())
    };
    let iceberg = decode(&raw.replace('+', " "))?;
    let mut values = Vec::new();
    if iceberg == "null" || raw == HIVE_NULL {
        values.push(PathValue::Null);
    }
    if raw.contains('+') {
        let plus_kept = decode(raw)?;
        values.push(PathValue::Text(plus_kept));
    }
    values.push(PathValue::Text(iceberg));
    Some(values)
}

/// What one reading of a path value becomes in a filter.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Reading {
    /// An exact condition on the source column.
    Condition(Condition),
    /// Not a value of the column's type: no file of the table can be in such a partition.
    Impossible,
    /// A value the column may hold but no literal expresses safely (a year past 9999, a float,
    /// a bucket number): the field cannot be pinned.
    Inexpressible,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Condition {
    /// `= literal` (the literal already quoted or checked).
    Equals(String),
    /// `>= low AND < high`; no upper bound when it would be past year 9999.
    Range { low: String, high: Option<String> },
}

/// The source column's type, as far as filters care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ColumnKind {
    Text,
    Integer {
        min: i128,
        max: i128,
    },
    Boolean,
    Decimal {
        precision: usize,
        scale: usize,
    },
    Date,
    Timestamp,
    /// float, double, binary, nested types ...: no literal is checked for them.
    Other,
}

impl ColumnKind {
    /// From a type as `DESCRIBE TABLE` prints it.
    fn of(data_type: &str) -> ColumnKind {
        let data_type = data_type.trim().to_ascii_lowercase();
        let integer = |min: i128, max: i128| ColumnKind::Integer { min, max };
        match data_type.as_str() {
            "string" => ColumnKind::Text,
            text if text.starts_with("varchar(") || text.starts_with("char(") => ColumnKind::Text,
            "tinyint" | "byte" => integer(i8::MIN.into(), i8::MAX.into()),
            "smallint" | "short" => integer(i16::MIN.into(), i16::MAX.into()),
            "int" | "integer" => integer(i32::MIN.into(), i32::MAX.into()),
            "bigint" | "long" => integer(i64::MIN.into(), i64::MAX.into()),
            "boolean" => ColumnKind::Boolean,
            "date" => ColumnKind::Date,
            "timestamp" | "timestamp_ntz" | "timestamp_ltz" => ColumnKind::Timestamp,
            "decimal" => ColumnKind::Decimal {
                precision: 10,
                scale: 0,
            },
            decimal if decimal.starts_with("decimal(") => decimal
                .strip_prefix("decimal(")
                .and_then(|rest| rest.strip_suffix(')'))
                .and_then(|arguments| arguments.split_once(','))
                .and_then(|(precision, scale)| {
                    Some((precision.trim().parse().ok()?, scale.trim().parse().ok()?))
                })
                .filter(|(precision, scale): &(usize, usize)| scale <= precision)
                .map_or(ColumnKind::Other, |(precision, scale)| {
                    ColumnKind::Decimal { precision, scale }
                }),
            _ => ColumnKind::Other,
        }
    }

    /// The reading of an identity partition's value: the literal that selects it, checked
    /// against the type (an unchecked literal could fail to cast and fail the whole statement
    /// under ANSI mode, or select nothing without it).
    fn identity(self, value: &str) -> Reading {
        let equals = |literal: String| Reading::Condition(Condition::Equals(literal));
        match self {
            ColumnKind::Text => equals(quote_string(value)),
            ColumnKind::Integer { min, max } => match value.parse::<i128>() {
                Ok(number) if (min..=max).contains(&number) => equals(number.to_string()),
                _ => Reading::Impossible,
            },
            ColumnKind::Boolean => match value {
                "true" | "false" => equals(value.to_string()),
                _ => Reading::Impossible,
            },
            ColumnKind::Decimal { precision, scale } => {
                let unsigned = value.strip_prefix('-').unwrap_or(value);
                let (whole, fraction) = unsigned.split_once('.').unwrap_or((unsigned, ""));
                let digits = |part: &str| part.bytes().all(|byte| byte.is_ascii_digit());
                let fits = !whole.is_empty()
                    && digits(whole)
                    && digits(fraction)
                    && (unsigned.contains('.') != fraction.is_empty())
                    && whole.trim_start_matches('0').len() <= precision - scale
                    && fraction.len() <= scale;
                if fits {
                    equals(quote_string(value))
                } else {
                    Reading::Impossible
                }
            }
            ColumnKind::Date => match parse_date(value) {
                Some(DateValue::InRange(date)) => equals(quote_string(&date.to_string())),
                Some(DateValue::OutOfRange) => Reading::Inexpressible,
                None => Reading::Impossible,
            },
            ColumnKind::Timestamp => match parse_timestamp(value) {
                Some(DateValue::InRange(time)) => equals(quote_string(
                    &time.format("%Y-%m-%d %H:%M:%S%.6f").to_string(),
                )),
                Some(DateValue::OutOfRange) => Reading::Inexpressible,
                None => Reading::Impossible,
            },
            ColumnKind::Other => Reading::Inexpressible,
        }
    }

    fn is_time(self) -> bool {
        matches!(self, ColumnKind::Date | ColumnKind::Timestamp)
    }
}

/// The years every engine casts a literal of (Spark's documented range).
const YEARS: std::ops::RangeInclusive<i64> = 1..=9999;

/// A date or time value that looked like one: within [`YEARS`] or not.
enum DateValue<T> {
    InRange(T),
    OutOfRange,
}

/// `[+-]digits-digits-digits...` split into its numbers (the shape of Iceberg's date, month and
/// hour values, whose years past 9999 carry a sign); `None` for any other shape.
fn date_parts(value: &str, count: usize) -> Option<Vec<i64>> {
    let (sign, unsigned) = match value.as_bytes().first() {
        Some(b'+') => (1, &value[1..]),
        Some(b'-') => (-1, &value[1..]),
        _ => (1, value),
    };
    let parts: Vec<&str> = unsigned.split('-').collect();
    if parts.len() != count
        || parts.iter().any(|part| {
            part.is_empty() || part.len() > 12 || !part.bytes().all(|b| b.is_ascii_digit())
        })
    {
        return None;
    }
    let mut numbers: Vec<i64> = parts
        .iter()
        .map(|part| part.parse().unwrap_or(i64::MAX))
        .collect();
    numbers[0] *= sign;
    Some(numbers)
}

/// `YYYY-MM-DD`: `None` when it is no date at all.
fn parse_date(value: &str) -> Option<DateValue<chrono::NaiveDate>> {
    let parts = date_parts(value, 3)?;
    if !YEARS.contains(&parts[0]) {
        return Some(DateValue::OutOfRange);
    }
    let date = chrono::NaiveDate::from_ymd_opt(
        i32::try_from(parts[0]).ok()?,
        u32::try_from(parts[1]).ok()?,
        u32::try_from(parts[2]).ok()?,
    )?;
    Some(DateValue::InRange(date))
}

/// An identity timestamp value as Iceberg writes it (`2024-05-01T12:00`, with seconds and a
/// fraction when not zero, and `Z` or an offset for a zoned column), as UTC: `None` when it is no
/// timestamp at all.
fn parse_timestamp(value: &str) -> Option<DateValue<chrono::NaiveDateTime>> {
    use chrono::{Datelike, NaiveDateTime, NaiveTime};
    let (date, time) = value.split_once('T')?;
    let day = match parse_date(date)? {
        DateValue::InRange(day) => day,
        DateValue::OutOfRange => return Some(DateValue::OutOfRange),
    };
    let (clock, offset_seconds) = if let Some(clock) = time.strip_suffix('Z') {
        (clock, 0)
    } else if let Some(at) = time.rfind(['+', '-']) {
        let (clock, offset) = time.split_at(at);
        let sign = if offset.starts_with('-') { -1 } else { 1 };
        let (hours, minutes) = offset[1..].split_once(':')?;
        let number = |text: &str| {
            (text.len() == 2 && text.bytes().all(|byte| byte.is_ascii_digit()))
                .then(|| text.parse::<i64>().ok())
                .flatten()
        };
        (
            clock,
            sign * (number(hours)? * 3600 + number(minutes)? * 60),
        )
    } else {
        (time, 0)
    };
    let clock = ["%H:%M", "%H:%M:%S", "%H:%M:%S%.f"]
        .iter()
        .find_map(|format| NaiveTime::parse_from_str(clock, format).ok())?;
    let utc = NaiveDateTime::new(day, clock)
        .checked_sub_signed(chrono::Duration::seconds(offset_seconds))?;
    Some(if YEARS.contains(&i64::from(utc.year())) {
        DateValue::InRange(utc)
    } else {
        DateValue::OutOfRange
    })
}

/// The reading of a time transform's value: `[low, high)` as literals, open-ended when the end
/// would be past year 9999 (wider, never narrower).
fn time_range(transform: &Transform, value: &str) -> Reading {
    use chrono::{Datelike, NaiveDate, NaiveDateTime, NaiveTime};
    let range =
        |low: String, high: Option<String>| Reading::Condition(Condition::Range { low, high });
    let in_years = |year: i32| YEARS.contains(&i64::from(year));
    let day_text = |date: NaiveDate| date.format("%Y-%m-%d").to_string();
    match transform {
        Transform::Year => {
            let year = match date_parts(value, 1) {
                Some(parts) => parts[0],
                None => return Reading::Impossible,
            };
            if !YEARS.contains(&year) {
                return Reading::Inexpressible;
            }
            range(
                format!("{year:04}-01-01"),
                (year < *YEARS.end()).then(|| format!("{:04}-01-01", year + 1)),
            )
        }
        Transform::Month => {
            let Some(parts) = date_parts(value, 2) else {
                return Reading::Impossible;
            };
            let (year, month) = (parts[0], parts[1]);
            if !(1..=12).contains(&month) {
                return Reading::Impossible;
            }
            if !YEARS.contains(&year) {
                return Reading::Inexpressible;
            }
            let next = if month == 12 {
                (year + 1, 1)
            } else {
                (year, month + 1)
            };
            range(
                format!("{year:04}-{month:02}-01"),
                YEARS
                    .contains(&next.0)
                    .then(|| format!("{:04}-{:02}-01", next.0, next.1)),
            )
        }
        Transform::Day => match parse_date(value) {
            Some(DateValue::InRange(day)) => range(
                day_text(day),
                day.succ_opt()
                    .filter(|next| in_years(next.year()))
                    .map(day_text),
            ),
            Some(DateValue::OutOfRange) => Reading::Inexpressible,
            None if date_parts(value, 3).is_some() => Reading::Inexpressible,
            None => Reading::Impossible,
        },
        Transform::Hour => {
            let Some((date, hour_text)) = value.rsplit_once('-') else {
                return Reading::Impossible;
            };
            let hour = match hour_text.parse::<u32>() {
                Ok(hour) if hour < 24 && hour_text.bytes().all(|byte| byte.is_ascii_digit()) => {
                    hour
                }
                _ => return Reading::Impossible,
            };
            let day = match parse_date(date) {
                Some(DateValue::InRange(day)) => day,
                Some(DateValue::OutOfRange) => return Reading::Inexpressible,
                None if date_parts(date, 3).is_some() => return Reading::Inexpressible,
                None => return Reading::Impossible,
            };
            let Some(start) = NaiveTime::from_hms_opt(hour, 0, 0) else {
                return Reading::Impossible;
            };
            let start = NaiveDateTime::new(day, start);
            let format = |time: NaiveDateTime| time.format("%Y-%m-%d %H:%M:%S").to_string();
            let end = start
                .checked_add_signed(chrono::Duration::hours(1))
                .filter(|end| in_years(end.year()));
            range(format(start), end.map(format))
        }
        Transform::Identity | Transform::Other(_) => Reading::Inexpressible,
    }
}

/// The term that pins one field to what its raw path value may stand for, or `None` when it
/// cannot be pinned (the field is then left out of the predicate: wider, never narrower): an
/// unknown type or column, a transform without predicate (bucket, truncate, void), a value no
/// literal expresses, or none of its readings a value of the column's type (a type read before
/// the column was promoted, say).
fn field_term(field: &PartitionField, raw: &str) -> Option<String> {
    if matches!(field.transform, Transform::Other(_)) {
        // Not even a null: `void` is null whatever its source holds.
        return None;
    }
    let kind = ColumnKind::of(field.source_type.as_deref()?);
    let column = quote_identifier(&field.source);
    let mut null = false;
    let mut equals: Vec<String> = Vec::new();
    let mut ranges: Vec<String> = Vec::new();
    for value in path_values(raw)? {
        let reading = match (&value, &field.transform) {
            (PathValue::Null, _) => {
                null = true;
                continue;
            }
            (PathValue::Text(text), Transform::Identity) => kind.identity(text),
            (_, _) if !kind.is_time() => return None,
            (PathValue::Text(text), time) => time_range(time, text),
        };
        match reading {
            Reading::Condition(Condition::Equals(literal)) => {
                if !equals.contains(&literal) {
                    equals.push(literal);
                }
            }
            Reading::Condition(Condition::Range { low, high }) => {
                let mut term = format!("{column} >= {}", quote_string(&low));
                if let Some(high) = high {
                    term.push_str(&format!(" AND {column} < {}", quote_string(&high)));
                }
                if !ranges.contains(&term) {
                    ranges.push(term);
                }
            }
            Reading::Impossible => {}
            Reading::Inexpressible => return None,
        }
    }
    let mut terms = Vec::new();
    if null {
        terms.push(format!("{column} IS NULL"));
    }
    match equals.len() {
        0 => {}
        1 => terms.push(format!("{column} = {}", equals[0])),
        _ => terms.push(format!("{column} IN ({})", equals.join(", "))),
    }
    terms.extend(ranges);
    match terms.len() {
        0 => None,
        1 => terms.pop(),
        _ => Some(format!(
            "({})",
            terms
                .iter()
                .map(|term| if term.contains(" AND ") {
                    format!("({term})")
                } else {
                    term.clone()
                })
                .collect::<Vec<_>>()
                .join(" OR ")
        )),
    }
}

/// The predicate selecting one partition path's files: a term per field its path pins, `AND`ed.
/// Never narrower than the partition: a field that cannot be pinned ([`field_term`]), is missing
/// from the path or given twice is left out, and a segment naming no field of the spec is
/// ignored. `None` when no field can be pinned: only the whole table selects its files.
pub fn partition_predicate(spec: &[PartitionField], path: &str) -> Option<String> {
    let mut raw_values: Vec<Option<Option<&str>>> = vec![None; spec.len()];
    for segment in path.split('/') {
        let Some((name, raw)) = segment.split_once('=') else {
            continue;
        };
        let Some(index) = spec.iter().position(|field| field.name == name) else {
            continue;
        };
        raw_values[index] = match raw_values[index] {
            None => Some(Some(raw)),
            Some(Some(earlier)) if earlier == raw => Some(Some(raw)),
            // Given twice with two values: no real path does that; pin neither.
            Some(_) => Some(None),
        };
    }
    let terms: Vec<String> = spec
        .iter()
        .zip(raw_values)
        .filter_map(|(field, raw)| field_term(field, raw.flatten()?))
        .collect();
    (!terms.is_empty()).then(|| terms.join(" AND "))
}

/// The `where` filters of the rewrite calls that together select these partitions' files: one
/// predicate per partition ([`partition_predicate`]), the same predicate once, `OR`ed into filters
/// of at most `max_bytes` each. `None` when only the whole table selects them: no partitions, a
/// partition none of whose fields can be pinned, or one predicate longer than `max_bytes`.
pub fn partition_filters(
    spec: &[PartitionField],
    paths: &[String],
    max_bytes: usize,
) -> Option<Vec<String>> {
    if paths.is_empty() {
        return None;
    }
    let mut predicates: Vec<String> = Vec::new();
    let mut known: HashSet<String> = HashSet::new();
    for path in paths {
        let predicate = partition_predicate(spec, path)?;
        if predicate.len() > max_bytes {
            return None;
        }
        if known.insert(predicate.clone()) {
            predicates.push(predicate);
        }
    }
    let mut filters: Vec<Vec<String>> = Vec::new();
    let mut length = 0;
    for predicate in predicates {
        // `(a) OR (b)`: two parentheses per predicate and ` OR ` between them.
        let added = predicate.len() + 2 + 4;
        match filters.last_mut() {
            Some(filter) if length + added <= max_bytes => {
                filter.push(predicate);
                length += added;
            }
            _ => {
                length = predicate.len() + 2;
                filters.push(vec![predicate]);
            }
        }
    }
    Some(
        filters
            .into_iter()
            .map(|predicates| {
                if predicates.len() == 1 {
                    predicates.into_iter().next().unwrap_or_default()
                } else {
                    predicates
                        .iter()
                        .map(|predicate| format!("({predicate})"))
                        .collect::<Vec<_>>()
                        .join(" OR ")
                }
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests;
