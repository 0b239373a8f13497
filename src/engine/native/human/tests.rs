//! Every transform and type against the strings a real table holds: Spark 3.5.9 with Iceberg
//! 1.10.1 (`spark.sql.session.timeZone=UTC`) wrote one table partitioned by an identity field of
//! every type it has, `bucket`, `truncate` and, per table, `years`, `months`, `days` and `hours`
//! of a `timestamp`, a `timestamp_ntz` and a `date`; the expected strings are its data files'
//! partition directories, decoded (the encoded form: `partition_paths_are_the_keys_spark_wrote`).
//! Types Spark cannot write (`time`, `uuid`, `fixed`, `timestamp_ns`) follow Java's `toString`
//! of the value, as `Identity.toHumanString` does.

use std::sync::Arc;

use iceberg::spec::{
    Literal, NestedField, PartitionSpec, PrimitiveLiteral, PrimitiveType, Schema, Struct,
    Transform, Type,
};

use super::human_string;
use crate::engine::native::plan::partition_path;
use crate::engine::native::table::partition_values;

fn micros(text: &str) -> i64 {
    let time = chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f").unwrap();
    time.and_utc().timestamp_micros()
}

fn days(text: &str) -> i32 {
    let date = chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d").unwrap();
    i32::try_from((date - chrono::NaiveDate::from_ymd_opt(1970, 1, 1).unwrap()).num_days()).unwrap()
}

fn render(transform: Transform, result: PrimitiveType, value: PrimitiveLiteral) -> String {
    human_string(&transform, &result, Some(&value)).unwrap()
}

/// The ordinal of a time transform as Iceberg computes it from a timestamp's micros.
fn ordinal(transform: Transform, text: &str) -> i32 {
    let micros = micros(text);
    let hours = micros.div_euclid(3_600_000_000);
    let date = chrono::DateTime::from_timestamp_micros(micros)
        .unwrap()
        .naive_utc();
    let months = (i64::from(chrono::Datelike::year(&date)) - 1970) * 12
        + i64::from(chrono::Datelike::month0(&date));
    i32::try_from(match transform {
        Transform::Year => i64::from(chrono::Datelike::year(&date)) - 1970,
        Transform::Month => months,
        Transform::Day => hours.div_euclid(24),
        Transform::Hour => hours,
        _ => unreachable!(),
    })
    .unwrap()
}

/// The timestamps of the `years`, `months`, `days` and `hours` tables, and the strings Spark's
/// files were written under, for each transform.
const TIME_CASES: [(&str, &str, &str, &str, &str); 7] = [
    (
        "2026-11-01 10:15:00",
        "2026",
        "2026-11",
        "2026-11-01",
        "2026-11-01-10",
    ),
    (
        "1969-12-31 23:59:59.999999",
        "1969",
        "1969-12",
        "1969-12-31",
        "1969-12-31-23",
    ),
    (
        "0001-01-01 00:00:00",
        "0001",
        "0001-01",
        "0001-01-01",
        "0001-01-01-00",
    ),
    (
        "1970-01-01 00:00:00",
        "1970",
        "1970-01",
        "1970-01-01",
        "1970-01-01-00",
    ),
    (
        "1899-02-01 23:00:00",
        "1899",
        "1899-02",
        "1899-02-01",
        "1899-02-01-23",
    ),
    (
        "2026-11-01 00:00:00",
        "2026",
        "2026-11",
        "2026-11-01",
        "2026-11-01-00",
    ),
    (
        "9999-12-31 23:00:00",
        "9999",
        "9999-12",
        "9999-12-31",
        "9999-12-31-23",
    ),
];

#[test]
fn year_month_day_and_hour_render_as_spark_wrote_them() {
    for (time, year, month, day, hour) in TIME_CASES {
        for (transform, result, expected) in [
            (Transform::Year, PrimitiveType::Int, year),
            (Transform::Month, PrimitiveType::Int, month),
            (Transform::Day, PrimitiveType::Date, day),
            (Transform::Hour, PrimitiveType::Int, hour),
        ] {
            let value = PrimitiveLiteral::Int(ordinal(transform, time));
            assert_eq!(
                render(transform, result, value),
                expected,
                "{transform} of {time}"
            );
        }
    }
}

#[test]
fn time_transforms_of_a_date_render_as_spark_wrote_them() {
    for (date, year, month, day) in [
        ("2026-11-01", "2026", "2026-11", "2026-11-01"),
        ("1969-12-31", "1969", "1969-12", "1969-12-31"),
        ("0001-01-01", "0001", "0001-01", "0001-01-01"),
    ] {
        let time = format!("{date} 00:00:00");
        assert_eq!(
            render(
                Transform::Year,
                PrimitiveType::Int,
                PrimitiveLiteral::Int(ordinal(Transform::Year, &time))
            ),
            year
        );
        assert_eq!(
            render(
                Transform::Month,
                PrimitiveType::Int,
                PrimitiveLiteral::Int(ordinal(Transform::Month, &time))
            ),
            month
        );
        assert_eq!(
            render(
                Transform::Day,
                PrimitiveType::Date,
                PrimitiveLiteral::Int(days(date))
            ),
            day
        );
    }
}

#[test]
fn identity_of_every_primitive_type_renders_as_spark_wrote_it() {
    use PrimitiveLiteral as L;
    use PrimitiveType as T;
    let float = |value: f32| L::Float(value.into());
    let double = |value: f64| L::Double(value.into());
    let decimal = |precision, scale| T::Decimal { precision, scale };
    let cases: Vec<(T, L, &str)> = vec![
        (T::Boolean, L::Boolean(true), "true"),
        (T::Boolean, L::Boolean(false), "false"),
        (T::Int, L::Int(7), "7"),
        (T::Int, L::Int(-3), "-3"),
        (T::Int, L::Int(i32::MAX), "2147483647"),
        (T::Long, L::Long(-12345678901), "-12345678901"),
        (T::Long, L::Long(i64::MAX), "9223372036854775807"),
        (T::Float, float(1.5), "1.5"),
        (T::Float, float(0.001), "0.001"),
        (T::Float, float(f32::NAN), "NaN"),
        (T::Float, float(3.4e38), "3.4E38"),
        (T::Float, float(12345678.0), "1.2345678E7"),
        (T::Double, double(1e7), "1.0E7"),
        (T::Double, double(1e-4), "1.0E-4"),
        (T::Double, double(-0.0), "-0.0"),
        (T::Double, double(0.001), "0.001"),
        (T::Double, double(f64::MAX), "1.7976931348623157E308"),
        (decimal(10, 2), L::Int128(1230), "12.30"),
        (decimal(10, 2), L::Int128(-5), "-0.05"),
        (decimal(10, 2), L::Int128(9999999999), "99999999.99"),
        (decimal(10, 2), L::Int128(0), "0.00"),
        (decimal(10, 2), L::Int128(100), "1.00"),
        (decimal(12, 9), L::Int128(1), "1E-9"),
        (decimal(12, 9), L::Int128(123000000000), "123.000000000"),
        (decimal(12, 9), L::Int128(1500000000), "1.500000000"),
        (decimal(12, 9), L::Int128(-1000), "-0.000001000"),
        (decimal(12, 9), L::Int128(10000), "0.000010000"),
        (T::Date, L::Int(days("2026-11-01")), "2026-11-01"),
        (T::Date, L::Int(days("1969-12-31")), "1969-12-31"),
        (T::Date, L::Int(days("0001-01-01")), "0001-01-01"),
        (T::Date, L::Int(days("9999-12-31")), "9999-12-31"),
        (T::Date, L::Int(days("2024-02-29")), "2024-02-29"),
        (
            T::Timestamptz,
            L::Long(micros("2026-11-01 10:15:00")),
            "2026-11-01T10:15:00+00:00",
        ),
        (
            T::Timestamptz,
            L::Long(micros("1969-12-31 23:59:59.999999")),
            "1969-12-31T23:59:59.999999+00:00",
        ),
        (
            T::Timestamptz,
            L::Long(micros("2026-02-03 04:05:06.123")),
            "2026-02-03T04:05:06.123+00:00",
        ),
        (T::Timestamptz, L::Long(0), "1970-01-01T00:00:00+00:00"),
        (
            T::Timestamptz,
            L::Long(micros("2024-02-29 12:00:00.1")),
            "2024-02-29T12:00:00.1+00:00",
        ),
        (
            T::Timestamp,
            L::Long(micros("2026-11-01 10:15:30.5")),
            "2026-11-01T10:15:30.5",
        ),
        (
            T::Timestamp,
            L::Long(micros("1960-01-01 00:00:00")),
            "1960-01-01T00:00:00",
        ),
        (
            T::Timestamp,
            L::Long(micros("2026-02-03 04:05:06.123456")),
            "2026-02-03T04:05:06.123456",
        ),
        (
            T::Timestamp,
            L::Long(micros("2000-01-01 00:00:00.000001")),
            "2000-01-01T00:00:00.000001",
        ),
        (T::String, L::String("eu west/ä+%=".into()), "eu west/ä+%="),
        (T::String, L::String(String::new()), ""),
        (T::Binary, L::Binary(vec![0, 1, 0xff]), "AAH/"),
        (T::Binary, L::Binary(vec![]), ""),
        (T::Binary, L::Binary(vec![0xff; 4]), "/////w=="),
        (T::Binary, L::Binary(vec![0]), "AA=="),
        (T::Binary, L::Binary(vec![1, 2]), "AQI="),
        // Java's `toString` of types Spark does not write.
        (
            T::Time,
            L::Long(10 * 3_600_000_000 + 15 * 60_000_000),
            "10:15",
        ),
        (T::Time, L::Long(37_230_123_000), "10:20:30.123"),
        (T::Time, L::Long(37_230_123_456), "10:20:30.123456"),
        (T::Time, L::Long(1_000_000), "00:00:01"),
        (
            T::Uuid,
            L::UInt128(0x0f8fad5b_d9cb_469f_a165_70867728950e),
            "0f8fad5b-d9cb-469f-a165-70867728950e",
        ),
        (T::Fixed(3), L::Binary(vec![0, 1, 0xff]), "AAH/"),
        (
            T::TimestampNs,
            L::Long(micros("2026-11-01 10:15:30") * 1000 + 7),
            "2026-11-01T10:15:30.000000007",
        ),
        (T::TimestamptzNs, L::Long(0), "1970-01-01T00:00:00+00:00"),
    ];
    for (result, value, expected) in cases {
        assert_eq!(
            render(Transform::Identity, result.clone(), value.clone()),
            expected,
            "identity of {value:?} as {result}"
        );
    }
}

#[test]
fn bucket_truncate_void_and_null_render_as_spark_wrote_them() {
    use PrimitiveLiteral as L;
    use PrimitiveType as T;
    for (transform, result, value, expected) in [
        (Transform::Bucket(16), T::Int, L::Int(11), "11"),
        (Transform::Bucket(8), T::Int, L::Int(0), "0"),
        (
            Transform::Truncate(3),
            T::String,
            L::String("eu ".into()),
            "eu ",
        ),
        (
            Transform::Truncate(3),
            T::String,
            L::String("abc".into()),
            "abc",
        ),
        (Transform::Truncate(10), T::Int, L::Int(-10), "-10"),
        (
            Transform::Truncate(10),
            T::Int,
            L::Int(2147483640),
            "2147483640",
        ),
        (Transform::Truncate(10), T::Long, L::Long(40), "40"),
        (
            Transform::Truncate(10),
            T::Decimal {
                precision: 10,
                scale: 2,
            },
            L::Int128(-10),
            "-0.10",
        ),
        (
            Transform::Truncate(10),
            T::Decimal {
                precision: 10,
                scale: 2,
            },
            L::Int128(9999999990),
            "99999999.90",
        ),
        (
            Transform::Truncate(2),
            T::Binary,
            L::Binary(vec![1, 2]),
            "AQI=",
        ),
        (Transform::Void, T::String, L::String("a".into()), "null"),
    ] {
        assert_eq!(render(transform, result, value), expected, "{transform}");
    }
    for (transform, result) in [
        (Transform::Identity, T::String),
        (Transform::Identity, T::Timestamptz),
        (Transform::Bucket(16), T::Int),
        (Transform::Truncate(3), T::String),
        (Transform::Year, T::Int),
        (Transform::Month, T::Int),
        (Transform::Day, T::Date),
        (Transform::Hour, T::Int),
        (Transform::Void, T::Long),
    ] {
        assert_eq!(human_string(&transform, &result, None).unwrap(), "null");
    }
}

#[test]
fn values_that_do_not_fit_their_type_render_nothing() {
    use PrimitiveLiteral as L;
    use PrimitiveType as T;
    for (transform, result, value) in [
        (Transform::Hour, T::Int, L::Long(1)),
        (Transform::Year, T::Int, L::String("2026".into())),
        (Transform::Identity, T::Date, L::Long(1)),
        (Transform::Identity, T::Time, L::Long(-1)),
        (Transform::Identity, T::Time, L::Long(86_400_000_000)),
        (Transform::Identity, T::Timestamp, L::Long(i64::MAX)),
        (Transform::Unknown, T::String, L::String("x".into())),
        (Transform::Day, T::Date, L::Int(i32::MAX)),
    ] {
        assert_eq!(
            human_string(&transform, &result, Some(&value)),
            None,
            "{value:?}"
        );
    }
}

fn schema() -> Schema {
    use PrimitiveType as T;
    let columns = [
        ("b", T::Boolean),
        ("i", T::Int),
        ("l", T::Long),
        ("f", T::Float),
        ("d", T::Double),
        (
            "dec",
            T::Decimal {
                precision: 10,
                scale: 2,
            },
        ),
        ("dt", T::Date),
        ("ts", T::Timestamptz),
        ("tsn", T::Timestamp),
        ("s", T::String),
        ("bin", T::Binary),
        (
            "sd",
            T::Decimal {
                precision: 12,
                scale: 9,
            },
        ),
        ("t2", T::Timestamptz),
    ];
    Schema::builder()
        .with_fields(
            columns
                .into_iter()
                .enumerate()
                .map(|(index, (name, kind))| {
                    Arc::new(NestedField::optional(
                        i32::try_from(index).unwrap() + 1,
                        name,
                        Type::Primitive(kind),
                    ))
                }),
        )
        .build()
        .unwrap()
}

/// The spec of Spark's table, and for each of its rows the values and the directory Spark wrote
/// the row's file under (`SELECT file_path FROM t.files`, the table prefix cut).
#[test]
fn partition_paths_are_the_keys_spark_wrote() {
    let schema = schema();
    let mut builder = PartitionSpec::builder(schema.clone()).with_spec_id(0);
    for (source, name, transform) in [
        ("b", "b", Transform::Identity),
        ("i", "i", Transform::Identity),
        ("l", "l", Transform::Identity),
        ("f", "f", Transform::Identity),
        ("d", "d", Transform::Identity),
        ("dec", "dec", Transform::Identity),
        ("dt", "dt", Transform::Identity),
        ("ts", "ts", Transform::Identity),
        ("tsn", "tsn", Transform::Identity),
        ("s", "s", Transform::Identity),
        ("bin", "bin", Transform::Identity),
        ("s", "s_bucket", Transform::Bucket(16)),
        ("l", "l_bucket", Transform::Bucket(8)),
        ("s", "s_trunc", Transform::Truncate(3)),
        ("i", "i_trunc", Transform::Truncate(10)),
        ("dec", "dec_trunc", Transform::Truncate(10)),
        ("sd", "sd", Transform::Identity),
        ("t2", "t2_hour", Transform::Hour),
    ] {
        builder = builder
            .add_partition_field(source, name, transform)
            .unwrap();
    }
    let spec = builder.build().unwrap();
    let primitive = |value: PrimitiveLiteral| Some(Literal::Primitive(value));
    use PrimitiveLiteral as L;
    let rows: [(Vec<Option<Literal>>, &str); 3] = [
        (
            vec![
                primitive(L::Boolean(true)),
                primitive(L::Int(7)),
                primitive(L::Long(-12345678901)),
                primitive(L::Float(1.5.into())),
                primitive(L::Double(1e7.into())),
                primitive(L::Int128(1230)),
                primitive(L::Int(days("2026-11-01"))),
                primitive(L::Long(micros("2026-11-01 10:15:00"))),
                primitive(L::Long(micros("2026-11-01 10:15:30.5"))),
                primitive(L::String("eu west/ä+%=".into())),
                primitive(L::Binary(vec![0, 1, 0xff])),
                primitive(L::Int(11)),
                primitive(L::Int(6)),
                primitive(L::String("eu ".into())),
                primitive(L::Int(0)),
                primitive(L::Int128(1230)),
                primitive(L::Int128(1)),
                primitive(L::Int(ordinal(Transform::Hour, "2026-11-01 10:15:00"))),
            ],
            "b=true/i=7/l=-12345678901/f=1.5/d=1.0E7/dec=12.30/dt=2026-11-01/\
             ts=2026-11-01T10%3A15%3A00%2B00%3A00/tsn=2026-11-01T10%3A15%3A30.5/\
             s=eu+west%2F%C3%A4%2B%25%3D/bin=AAH%2F/s_bucket=11/l_bucket=6/s_trunc=eu+/i_trunc=0/\
             dec_trunc=12.30/sd=1E-9/t2_hour=2026-11-01-10",
        ),
        (
            vec![
                primitive(L::Boolean(true)),
                primitive(L::Int(123456)),
                primitive(L::Long(42)),
                primitive(L::Float(f32::NAN.into())),
                primitive(L::Double((-0.0).into())),
                primitive(L::Int128(9999999999)),
                primitive(L::Int(days("0001-01-01"))),
                primitive(L::Long(micros("2026-02-03 04:05:06.123"))),
                primitive(L::Long(micros("2026-02-03 04:05:06.123456"))),
                primitive(L::String("abcdef".into())),
                primitive(L::Binary(vec![0xff; 4])),
                primitive(L::Int(5)),
                primitive(L::Int(6)),
                primitive(L::String("abc".into())),
                primitive(L::Int(123450)),
                primitive(L::Int128(9999999990)),
                primitive(L::Int128(1500000000)),
                primitive(L::Int(ordinal(Transform::Hour, "1969-12-31 23:59:59.999999"))),
            ],
            "b=true/i=123456/l=42/f=NaN/d=-0.0/dec=99999999.99/dt=0001-01-01/\
             ts=2026-02-03T04%3A05%3A06.123%2B00%3A00/tsn=2026-02-03T04%3A05%3A06.123456/s=abcdef/\
             bin=%2F%2F%2F%2F%2Fw%3D%3D/s_bucket=5/l_bucket=6/s_trunc=abc/i_trunc=123450/\
             dec_trunc=99999999.90/sd=1.500000000/t2_hour=1969-12-31-23",
        ),
        (
            vec![None; 18],
            "b=null/i=null/l=null/f=null/d=null/dec=null/dt=null/ts=null/tsn=null/s=null/bin=null/\
             s_bucket=null/l_bucket=null/s_trunc=null/i_trunc=null/dec_trunc=null/sd=null/t2_hour=null",
        ),
    ];
    for (values, expected) in rows {
        let data = Struct::from_iter(values);
        let rendered = partition_values(&spec, &schema, &data).expect("the values fit the spec");
        assert_eq!(partition_path(&rendered), expected);
    }
}

/// A spec as table metadata holds it (iceberg-rust's builder refuses a void field named as a
/// column, which Java's v1 specs have after a field is dropped): (source column, name, transform).
fn spec_from_metadata(fields: &[(i32, &str, &str)]) -> PartitionSpec {
    let fields: Vec<serde_json::Value> = fields
        .iter()
        .enumerate()
        .map(|(index, (source, name, transform))| {
            serde_json::json!({
                "source-id": source,
                "field-id": 1000 + index,
                "name": name,
                "transform": transform,
            })
        })
        .collect();
    serde_json::from_value(serde_json::json!({"spec-id": 1, "fields": fields})).unwrap()
}

/// Spark writes the files of a spec whose fields are all `void` (a v1 table whose only partition
/// field was dropped) directly under `data/`: no partition directory, as an unpartitioned table.
#[test]
fn a_spec_of_void_fields_only_is_unpartitioned() {
    let schema = schema();
    let spec = spec_from_metadata(&[(10, "s", "void")]);
    let data = Struct::from_iter([None]);
    assert_eq!(partition_values(&spec, &schema, &data), Some(Vec::new()));

    // Beside other fields a void field is rendered `null`: Spark's key
    // `a=y/s=null/bin_trunc=%2Fw%3D%3D` for a v1 table partitioned by (a, s, truncate(2, bin))
    // whose field `s` was dropped.
    let spec = spec_from_metadata(&[
        (10, "a", "identity"),
        (10, "s", "void"),
        (11, "bin_trunc", "truncate[2]"),
    ]);
    let data = Struct::from_iter([
        Some(Literal::Primitive(PrimitiveLiteral::String("y".into()))),
        None,
        Some(Literal::Primitive(PrimitiveLiteral::Binary(vec![0xff]))),
    ]);
    let rendered = partition_values(&spec, &schema, &data).unwrap();
    assert_eq!(partition_path(&rendered), "a=y/s=null/bin_trunc=%2Fw%3D%3D");
}
