//! PyIceberg as a second independent reader (deploy/local/pyiceberg.sh): what it reads of a
//! table in a REST catalog, compared with what Spark reads.

use super::spark::{env, fixture_output, printed, Lakehouse};

/// Rows and the sum of a CRC-32 of each row of `id, region, ts, amount`, in Spark SQL: what
/// [`pyiceberg_checksum`] computes from PyIceberg's read. Columns `crc_rows` and `crc_sum`.
pub fn crc_statement(table: &str) -> String {
    format!(
        "SELECT count(*) AS crc_rows, \
         sum(crc32(concat_ws('|', id, region, unix_micros(ts), amount))) AS crc_sum \
         FROM lakehouse.{table}"
    )
}

/// What PyIceberg (neither Spark nor iceberg-rust) reads of `table` (`namespace.name`) in the
/// lakehouse's REST catalog, reached with `token`: its rows and [`crc_statement`]'s sum.
pub fn pyiceberg_checksum(lakehouse: &Lakehouse, token: &str, table: &str) -> (String, String) {
    let stdout = checksum_script(lakehouse, token, table, &[]);
    let field = |name: &str| printed(&stdout, name);
    (field("rows"), field("crc"))
}

/// What PyIceberg reads of every snapshot of `table` (time travel), oldest first: (snapshot id,
/// rows, [`crc_statement`]'s sum). A snapshot whose files are gone fails the read, and the test.
pub fn pyiceberg_snapshot_checksums(
    lakehouse: &Lakehouse,
    token: &str,
    table: &str,
) -> Vec<(String, String, String)> {
    checksum_script(lakehouse, token, table, &["snapshots"])
        .lines()
        .filter(|line| line.starts_with("snapshot="))
        .map(|line| {
            let field = |name: &str| {
                line.split(' ')
                    .find_map(|part| part.strip_prefix(&format!("{name}=")))
                    .unwrap_or_else(|| panic!("no {name} in {line}"))
                    .to_string()
            };
            (field("snapshot"), field("rows"), field("crc"))
        })
        .collect()
}

/// What `tests/fixtures/pyiceberg_checksum.py` prints for `table`, with `more` arguments.
fn checksum_script(lakehouse: &Lakehouse, token: &str, table: &str, more: &[&str]) -> String {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/pyiceberg_checksum.py"
    );
    fixture_output(
        std::process::Command::new(env("ICEPACK_TEST_PYICEBERG_PYTHON"))
            .arg(script)
            .arg(&lakehouse.catalog.uri)
            .arg(token)
            .arg(&lakehouse.s3_endpoint)
            .arg(table)
            .args(more),
        "pyiceberg_checksum.py",
    )
}
