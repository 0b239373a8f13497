//! Partition values as Iceberg's Java implementation renders them (`Transform.toHumanString`):
//! the strings a Spark or Flink writer puts in a data file's key (`ts_hour=2026-11-01-10`), from
//! which icepack names the partitions it counts. The native engine matches a table's files to a
//! run's partitions by these strings, so a value rendered any other way is a partition that is
//! never compacted.
//!
//! iceberg-rust's own `Transform::to_human_string` renders a value through the transform's result
//! type, which is right for `day` (a date) but gives `hour`, `month` and `year` as plain integers
//! (`492418` for `2026-03-05-10`); this module follows Java for every transform and type:
//!
//! | transform | rendering (Java) | example |
//! |---|---|---|
//! | any, a null value; `void` | `null` | `null` |
//! | `year` | `%04d` of 1970 + ordinal | `2026` |
//! | `month` | `%04d-%02d`, floor division by 12 | `2026-11`, `1969-12` |
//! | `day`, identity of `date` | `%04d-%02d-%02d` | `2026-11-01` |
//! | `hour` | `%04d-%02d-%02d-%02d` | `2026-11-01-10` |
//! | `bucket[N]` | the bucket number | `7` |
//! | identity, `truncate[W]` of a number, string or boolean | Java's `toString` | `-3`, `eu west`, `true` |
//! | identity of `float`, `double` | `Float.toString`, `Double.toString` | `1.5`, `1.0E7`, `NaN` |
//! | identity, `truncate` of `decimal` | `BigDecimal.toString` | `12.30`, `1E-10` |
//! | identity of `time` | `LocalTime.toString` | `10:15`, `10:15:30.123` |
//! | identity of `timestamp` / `timestamptz` (and `_ns`) | ISO local date-time (`+00:00` for tz) | `2026-11-01T10:15:30.5` |
//! | identity of `uuid` | lowercase, hyphenated | `0f8fad5b-d9cb-469f-a165-70867728950e` |
//! | identity, `truncate` of `binary`, `fixed` | Base64 with padding | `AAE=` |
//!
//! The strings in the tests are those of a real table Spark (with Iceberg 1.10) wrote.

use iceberg::spec::{PrimitiveLiteral, PrimitiveType, Transform};

const MICROS_PER_SECOND: i64 = 1_000_000;
const NANOS_PER_SECOND: i64 = 1_000_000_000;
const SECONDS_PER_DAY: i64 = 86_400;

/// The Java human string of a partition value of `transform` whose result type is
/// `result_type`, or `None` when the value does not fit the type (hostile or corrupt metadata)
/// or the transform is unknown.
pub fn human_string(
    transform: &Transform,
    result_type: &PrimitiveType,
    value: Option<&PrimitiveLiteral>,
) -> Option<String> {
    let Some(value) = value else {
        return Some("null".to_string());
    };
    match (transform, value) {
        (Transform::Void, _) => Some("null".to_string()),
        (Transform::Unknown, _) => None,
        (Transform::Year, PrimitiveLiteral::Int(ordinal)) => Some(year(1970 + i64::from(*ordinal))),
        (Transform::Month, PrimitiveLiteral::Int(ordinal)) => {
            let ordinal = i64::from(*ordinal);
            Some(format!(
                "{}-{:02}",
                year(1970 + ordinal.div_euclid(12)),
                1 + ordinal.rem_euclid(12)
            ))
        }
        (Transform::Day, PrimitiveLiteral::Int(days)) => day(i64::from(*days)),
        (Transform::Hour, PrimitiveLiteral::Int(hours)) => {
            let time = timestamp(i64::from(*hours).checked_mul(3600)?, 0)?;
            Some(format!(
                "{}-{}",
                date_string(time.date()),
                two(i64::from(chrono::Timelike::hour(&time)))
            ))
        }
        (Transform::Bucket(_), PrimitiveLiteral::Int(bucket)) => Some(bucket.to_string()),
        (Transform::Identity | Transform::Truncate(_), value) => identity(result_type, value),
        _ => None,
    }
}

/// A value of a column's own type, as Java's `Identity.toHumanString` renders it.
fn identity(result_type: &PrimitiveType, value: &PrimitiveLiteral) -> Option<String> {
    match (result_type, value) {
        (PrimitiveType::Boolean, PrimitiveLiteral::Boolean(value)) => Some(value.to_string()),
        (PrimitiveType::Int, PrimitiveLiteral::Int(value)) => Some(value.to_string()),
        (PrimitiveType::Long, PrimitiveLiteral::Long(value)) => Some(value.to_string()),
        (PrimitiveType::Float, PrimitiveLiteral::Float(value)) => Some(java_floating(
            value.0.is_nan(),
            value.0.is_infinite(),
            &format!("{:e}", value.0),
        )),
        (PrimitiveType::Double, PrimitiveLiteral::Double(value)) => Some(java_floating(
            value.0.is_nan(),
            value.0.is_infinite(),
            &format!("{:e}", value.0),
        )),
        (PrimitiveType::Decimal { scale, .. }, PrimitiveLiteral::Int128(unscaled)) => {
            Some(big_decimal(*unscaled, i64::from(*scale)))
        }
        (PrimitiveType::Date, PrimitiveLiteral::Int(days)) => day(i64::from(*days)),
        (PrimitiveType::Time, PrimitiveLiteral::Long(micros)) => {
            let nanos = micros.checked_mul(1000)?;
            (0..SECONDS_PER_DAY * NANOS_PER_SECOND)
                .contains(&nanos)
                .then(|| local_time(nanos / NANOS_PER_SECOND, nanos % NANOS_PER_SECOND, false))
        }
        (
            PrimitiveType::Timestamp
            | PrimitiveType::Timestamptz
            | PrimitiveType::TimestampNs
            | PrimitiveType::TimestamptzNs,
            PrimitiveLiteral::Long(value),
        ) => {
            let nanos = matches!(
                result_type,
                PrimitiveType::TimestampNs | PrimitiveType::TimestamptzNs
            );
            let per_second = if nanos {
                NANOS_PER_SECOND
            } else {
                MICROS_PER_SECOND
            };
            let local = iso_timestamp(
                value.div_euclid(per_second),
                value.rem_euclid(per_second) * (NANOS_PER_SECOND / per_second),
            )?;
            let zoned = matches!(
                result_type,
                PrimitiveType::Timestamptz | PrimitiveType::TimestamptzNs
            );
            Some(if zoned { local + "+00:00" } else { local })
        }
        (PrimitiveType::String, PrimitiveLiteral::String(value)) => Some(value.clone()),
        (PrimitiveType::Uuid, PrimitiveLiteral::UInt128(value)) => {
            let hex = format!("{value:032x}");
            Some(format!(
                "{}-{}-{}-{}-{}",
                &hex[..8],
                &hex[8..12],
                &hex[12..16],
                &hex[16..20],
                &hex[20..]
            ))
        }
        (PrimitiveType::Fixed(_) | PrimitiveType::Binary, PrimitiveLiteral::Binary(bytes)) => {
            Some(base64(bytes))
        }
        _ => None,
    }
}

/// Java's `%04d` of a year (a sign counts in the width: `-001`).
fn year(year: i64) -> String {
    format!("{year:04}")
}

fn two(number: i64) -> String {
    format!("{number:02}")
}

/// `TransformUtil.humanDay`: `%04d-%02d-%02d` of the day `days` after 1970-01-01.
fn day(days: i64) -> Option<String> {
    Some(date_string(
        timestamp(days.checked_mul(SECONDS_PER_DAY)?, 0)?.date(),
    ))
}

fn date_string(date: chrono::NaiveDate) -> String {
    format!(
        "{}-{}-{}",
        year(i64::from(chrono::Datelike::year(&date))),
        two(i64::from(chrono::Datelike::month(&date))),
        two(i64::from(chrono::Datelike::day(&date)))
    )
}

fn timestamp(seconds: i64, nanos: i64) -> Option<chrono::NaiveDateTime> {
    chrono::DateTime::from_timestamp(seconds, u32::try_from(nanos).ok()?)
        .map(|time| time.naive_utc())
}

/// `DateTimeFormatter.ISO_LOCAL_DATE_TIME`: the date (a year past 9999 with `+`), `T`, the time
/// with its seconds always, and the fraction of a second with its trailing zeros cut.
fn iso_timestamp(seconds: i64, nanos: i64) -> Option<String> {
    let time = timestamp(seconds, nanos)?;
    let date = time.date();
    let year = chrono::Datelike::year(&date);
    let year = if year > 9999 {
        format!("+{year}")
    } else if year < 0 {
        format!("-{:04}", -i64::from(year))
    } else {
        format!("{year:04}")
    };
    Some(format!(
        "{year}-{}-{}T{}",
        two(i64::from(chrono::Datelike::month(&date))),
        two(i64::from(chrono::Datelike::day(&date))),
        local_time(
            seconds.rem_euclid(SECONDS_PER_DAY),
            i64::from(chrono::Timelike::nanosecond(&time)),
            true
        )
    ))
}

/// A time of day: `LocalTime.toString` (`iso == false`: `HH:mm`, seconds only when not zero, the
/// fraction in groups of three digits) or `ISO_LOCAL_TIME` (`iso`: seconds always, the fraction
/// with its trailing zeros cut).
fn local_time(second_of_day: i64, nanos: i64, iso: bool) -> String {
    let (hour, minute, second) = (
        second_of_day / 3600,
        second_of_day / 60 % 60,
        second_of_day % 60,
    );
    let mut text = format!("{hour:02}:{minute:02}");
    if iso || second > 0 || nanos > 0 {
        text.push_str(&format!(":{second:02}"));
    }
    if nanos > 0 {
        let digits = format!("{nanos:09}");
        let fraction = if iso {
            digits.trim_end_matches('0')
        } else if nanos % 1_000_000 == 0 {
            &digits[..3]
        } else if nanos % 1000 == 0 {
            &digits[..6]
        } else {
            &digits
        };
        text.push('.');
        text.push_str(fraction);
    }
    text
}

/// Java's `Float.toString` / `Double.toString` from Rust's shortest round-trip digits in
/// scientific form (`1.5e7`): plain between 10^-3 and 10^7 with at least one fraction digit,
/// else `d.dddE[-]n`.
fn java_floating(nan: bool, infinite: bool, scientific: &str) -> String {
    if nan {
        return "NaN".to_string();
    }
    let (negative, scientific) = match scientific.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, scientific),
    };
    let sign = if negative { "-" } else { "" };
    if infinite {
        return format!("{sign}Infinity");
    }
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((scientific, "0"));
    let exponent: i64 = exponent.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    if digits.chars().all(|digit| digit == '0') {
        return format!("{sign}0.0");
    }
    if (-3..7).contains(&exponent) {
        let point = exponent + 1;
        let text = if point <= 0 {
            format!(
                "0.{}{digits}",
                "0".repeat(usize::try_from(-point).unwrap_or(0))
            )
        } else {
            let point = usize::try_from(point).unwrap_or(0);
            let padded = format!("{digits:0<point$}");
            let (whole, fraction) = padded.split_at(point);
            let fraction = if fraction.is_empty() { "0" } else { fraction };
            format!("{whole}.{fraction}")
        };
        format!("{sign}{text}")
    } else {
        let (first, rest) = digits.split_at(1);
        let rest = if rest.is_empty() { "0" } else { rest };
        format!("{sign}{first}.{rest}E{exponent}")
    }
}

/// Java's `BigDecimal.toString` of `unscaled × 10^-scale`: plain when the scale is not negative
/// and the adjusted exponent is at least -6, else scientific (`1E-10`, `1.5E+3`).
fn big_decimal(unscaled: i128, scale: i64) -> String {
    let sign = if unscaled < 0 { "-" } else { "" };
    let digits = unscaled.unsigned_abs().to_string();
    let length = i64::try_from(digits.len()).unwrap_or(i64::MAX);
    let adjusted = -scale + (length - 1);
    if scale == 0 {
        return format!("{sign}{digits}");
    }
    if scale > 0 && adjusted >= -6 {
        let scale = usize::try_from(scale).unwrap_or(0);
        let text = if digits.len() > scale {
            let (whole, fraction) = digits.split_at(digits.len() - scale);
            format!("{whole}.{fraction}")
        } else {
            format!("0.{}{digits}", "0".repeat(scale - digits.len()))
        };
        return format!("{sign}{text}");
    }
    let (first, rest) = digits.split_at(1);
    let mantissa = if rest.is_empty() {
        first.to_string()
    } else {
        format!("{first}.{rest}")
    };
    let exponent_sign = if adjusted > 0 { "+" } else { "" };
    format!("{sign}{mantissa}E{exponent_sign}{adjusted}")
}

/// Base64 with the standard alphabet and padding (`java.util.Base64.getEncoder()`).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut text = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let buffer = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let bits = u32::from(buffer[0]) << 16 | u32::from(buffer[1]) << 8 | u32::from(buffer[2]);
        for index in 0..4 {
            if index <= chunk.len() {
                text.push(char::from(
                    ALPHABET[(bits >> (18 - 6 * index) & 63) as usize],
                ));
            } else {
                text.push('=');
            }
        }
    }
    text
}

#[cfg(test)]
mod tests;
