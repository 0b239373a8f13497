//! The spark-sql command line of a run: catalog `--conf`s as the reference workflow sets them,
//! the extra settings icepack needs to read the result, and the statements.

use std::collections::BTreeMap;

use crate::config::{CatalogConfig, SparkConfig};

use crate::base::redact::{hide_secrets, is_secret_name, is_secret_setting, HIDDEN};

/// The arguments after the spark-sql executable: options, confs, then `-e <statements>`, every
/// setting on the command line. For tools and tests; runs keep secrets off it ([`command_line`]).
pub fn spark_sql_args(
    spark: &SparkConfig,
    catalog_name: &str,
    catalog: &CatalogConfig,
    statements: &str,
) -> Vec<String> {
    let mut args = spark_sql_options(spark);
    for (key, value) in spark_conf(spark, catalog_name, catalog) {
        args.push("--conf".to_string());
        args.push(format!("{key}={value}"));
    }
    args.push("-e".to_string());
    args.push(statements.to_string());
    args
}

/// `--master`, `--packages` and `--jars` of a spark-sql command line. A master URL that carries
/// a secret is a setting instead (`spark.master`, [`spark_conf`]): it goes to the secrets file.
pub fn spark_sql_options(spark: &SparkConfig) -> Vec<String> {
    let mut args = Vec::new();
    if !spark.master.is_empty() && !is_secret_setting("spark.master", &spark.master) {
        args.push("--master".to_string());
        args.push(spark.master.clone());
    }
    if !spark.packages.is_empty() {
        args.push("--packages".to_string());
        args.push(spark.packages.join(","));
    }
    if !spark.jars.is_empty() {
        args.push("--jars".to_string());
        args.push(spark.jars.join(","));
    }
    args
}

/// The statements as a file spark-sql runs (`-f`): `;`-separated, one statement a line.
pub fn statements_file(statements: &[String]) -> String {
    statements.join(";\n") + ";\n"
}

/// A run's spark-sql command line: the options, `--properties-file` when some settings are secret
/// ([`is_secret_setting`]: their values are in that file only), every other setting as `--conf`, then the statements:
/// `-f` and the file that holds them ([`statements_file`]) — a run's statements can be longer
/// than a command line takes (Linux refuses one argument over 128 KiB) — or, without a file,
/// `-e` and the statements themselves.
pub fn command_line(
    options: &[String],
    conf: &BTreeMap<String, String>,
    statements: &[String],
    properties_file: Option<&str>,
    statements_path: Option<&str>,
) -> Vec<String> {
    let mut args = options.to_vec();
    if let Some(file) = properties_file {
        args.push("--properties-file".to_string());
        args.push(file.to_string());
    }
    for (key, value) in conf {
        if !is_secret_setting(key, value) {
            args.push("--conf".to_string());
            args.push(format!("{key}={value}"));
        }
    }
    match statements_path {
        Some(path) => {
            args.push("-f".to_string());
            args.push(path.to_string());
        }
        None if !statements.is_empty() => {
            args.push("-e".to_string());
            args.push(statements.join(";\n") + ";");
        }
        None => {}
    }
    args
}

/// The secret settings as a Java properties file (`spark-submit --properties-file`), after
/// `defaults` (the `spark-defaults.conf` a properties file would otherwise replace). `None` when
/// no setting is secret.
pub fn secret_properties(conf: &BTreeMap<String, String>, defaults: &str) -> Option<String> {
    let secret: Vec<(&String, &String)> = conf
        .iter()
        .filter(|(key, value)| is_secret_setting(key, value))
        .collect();
    if secret.is_empty() {
        return None;
    }
    let mut file = String::from(defaults);
    if !file.is_empty() && !file.ends_with('\n') {
        file.push('\n');
    }
    for (key, value) in secret {
        file.push_str(&escape_property(key, true));
        file.push('=');
        file.push_str(&escape_property(value, false));
        file.push('\n');
    }
    Some(file)
}

/// java.util.Properties escaping: backslash escapes, `\uXXXX` outside printable ASCII, and
/// separators escaped in keys (and a value's first character).
fn escape_property(text: &str, is_key: bool) -> String {
    let mut escaped = String::with_capacity(text.len());
    for (index, c) in text.chars().enumerate() {
        match c {
            '\\' => escaped.push_str("\\\\"),
            '\n' => escaped.push_str("\\n"),
            '\r' => escaped.push_str("\\r"),
            '\t' => escaped.push_str("\\t"),
            '=' | ':' | '#' | '!' | ' ' if is_key || index == 0 => {
                escaped.push('\\');
                escaped.push(c);
            }
            c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    escaped.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => escaped.push(c),
        }
    }
    escaped
}

/// Every Spark setting of a run: what icepack needs, the catalog as the reference workflow
/// configures it, then `[spark] conf`. Values may be secrets ([`is_secret_setting`]).
pub fn spark_conf(
    spark: &SparkConfig,
    name: &str,
    catalog: &CatalogConfig,
) -> BTreeMap<String, String> {
    let prefix = format!("spark.sql.catalog.{name}");
    let mut confs = BTreeMap::new();
    let mut set = |key: String, value: &str| {
        confs.insert(key, value.to_string());
    };
    // What icepack needs: a result it can parse, no Derby metastore, no UI port, UTC timestamps.
    set("spark.sql.cli.print.header".into(), "true");
    set("spark.sql.catalogImplementation".into(), "in-memory");
    set("spark.ui.enabled".into(), "false");
    set("spark.sql.session.timeZone".into(), "UTC");
    // The catalog, as the reference workflow configures it.
    set(
        "spark.sql.extensions".into(),
        "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
    );
    set(prefix.clone(), "org.apache.iceberg.spark.SparkCatalog");
    set(format!("{prefix}.catalog-impl"), &catalog.catalog_impl);
    set(format!("{prefix}.warehouse"), &catalog.warehouse);
    if !catalog.uri.is_empty() {
        set(format!("{prefix}.uri"), &catalog.uri);
    }
    set(format!("{prefix}.io-impl"), &catalog.io_impl);
    if !catalog.s3_endpoint.is_empty() {
        set(format!("{prefix}.s3.endpoint"), &catalog.s3_endpoint);
        set(format!("{prefix}.s3.path-style-access"), "true");
        set("spark.hadoop.fs.s3a.endpoint".into(), &catalog.s3_endpoint);
        set("spark.hadoop.fs.s3a.path.style.access".into(), "true");
    }
    for (key, value) in &catalog.properties {
        set(format!("{prefix}.{key}"), value);
    }
    for (key, value) in &spark.conf {
        set(key.clone(), value);
    }
    if !spark.master.is_empty() && is_secret_setting("spark.master", &spark.master) {
        set("spark.master".into(), &spark.master);
    }
    confs
}

/// The command line for logs: secrets hidden (a secret setting's whole value, the secret parts
/// of any other argument), the statements' count only.
pub fn describe_args(args: &[String]) -> String {
    let mut shown = Vec::with_capacity(args.len());
    let mut previous = "";
    for arg in args {
        let text = if previous == "--conf" {
            match arg.split_once('=') {
                Some((key, _)) if is_secret_name(key) => format!("{key}={HIDDEN}"),
                _ => hide_secrets(arg),
            }
        } else if previous == "-e" {
            format!("<{} statements>", arg.matches(";\n").count() + 1)
        } else {
            hide_secrets(arg)
        };
        shown.push(text);
        previous = arg;
    }
    shown.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn the_reference_confs_are_set() {
        let mut config = Config::default();
        let catalog = config.catalogs.get_mut("lakehouse").unwrap();
        catalog.s3_endpoint = "http://127.0.0.1:9000".to_string();
        catalog
            .properties
            .insert("s3.secret-access-key".to_string(), "hunter22".to_string());
        let catalog = config.catalogs["lakehouse"].clone();
        let args = spark_sql_args(&config.spark, "lakehouse", &catalog, "SELECT 1;");
        let line = args.join(" ");
        assert!(line.starts_with("--packages org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.1,org.apache.hadoop:hadoop-aws:3.3.4,com.amazonaws:aws-java-sdk-bundle:1.12.262"));
        for expected in [
            "--conf spark.sql.extensions=org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
            "--conf spark.sql.catalog.lakehouse=org.apache.iceberg.spark.SparkCatalog",
            "--conf spark.sql.catalog.lakehouse.catalog-impl=org.apache.iceberg.rest.RESTCatalog",
            "--conf spark.sql.catalog.lakehouse.warehouse=s3://lakehouse-data/warehouse",
            "--conf spark.sql.catalog.lakehouse.uri=http://iceberg-rest:8181",
            "--conf spark.sql.catalog.lakehouse.io-impl=org.apache.iceberg.aws.s3.S3FileIO",
            "--conf spark.sql.catalog.lakehouse.s3.endpoint=http://127.0.0.1:9000",
            "--conf spark.sql.catalog.lakehouse.s3.path-style-access=true",
            "--conf spark.hadoop.fs.s3a.endpoint=http://127.0.0.1:9000",
            "--conf spark.hadoop.fs.s3a.path.style.access=true",
            "--conf spark.sql.cli.print.header=true",
        ] {
            assert!(line.contains(expected), "missing {expected} in {line}");
        }
        assert_eq!(
            args[args.len() - 2..],
            ["-e".to_string(), "SELECT 1;".to_string()]
        );
        let described = describe_args(&args);
        assert!(!described.contains("hunter22"), "{described}");
        assert!(described.contains("s3.secret-access-key=***"));
        assert!(is_secret_name(
            "spark.sql.catalog.lakehouse.s3.secret-access-key"
        ));
    }

    #[test]
    fn secret_settings_go_to_the_properties_file_only() {
        for key in [
            "spark.sql.catalog.c.token",
            "spark.sql.catalog.c.credential",
            "spark.sql.catalog.c.jdbc.password",
            "spark.sql.catalog.c.header.Authorization",
            "spark.sql.catalog.c.rest.auth.oauth2.token",
            "spark.sql.catalog.c.s3.session-key",
            "spark.hadoop.fs.s3a.secret.key",
        ] {
            assert!(is_secret_name(key), "{key}");
        }
        assert!(!is_secret_name("spark.sql.catalog.c.uri"));
        let conf = BTreeMap::from([
            (
                "spark.sql.catalog.c.uri".to_string(),
                "http://rest:8181".to_string(),
            ),
            (
                "spark.sql.catalog.c.token".to_string(),
                "t=k:n\\é".to_string(),
            ),
        ]);
        let args = command_line(&[], &conf, &["SELECT 1".to_string()], Some("/run/p"), None);
        assert_eq!(
            args,
            [
                "--properties-file",
                "/run/p",
                "--conf",
                "spark.sql.catalog.c.uri=http://rest:8181",
                "-e",
                "SELECT 1;"
            ]
        );
        let file = secret_properties(&conf, "spark.master local[2]").unwrap();
        assert_eq!(
            file,
            "spark.master local[2]\nspark.sql.catalog.c.token=t=k:n\\\\\\u00e9\n"
        );
        assert_eq!(secret_properties(&BTreeMap::new(), ""), None);
    }

    /// Issue 31 item 5: the Azure shared key, a GCS private key and a JDBC URI's password are
    /// secrets like the others: in the secrets file only, never on the command line nor in its
    /// description, and a master URL with a password becomes a setting of that file too.
    #[test]
    fn azure_gcs_and_jdbc_secrets_stay_off_the_command_line() {
        let mut config = Config::default();
        config.spark.master = "spark://ops:MASTERPW@spark-master:7077".to_string();
        let catalog = config.catalogs.get_mut("lakehouse").unwrap();
        catalog.catalog_impl = "org.apache.iceberg.jdbc.JdbcCatalog".to_string();
        catalog.uri = "jdbc:postgresql://db:5432/catalog?user=icepack&password=JDBCPW".to_string();
        for (key, value) in [
            ("adls.auth.shared-key.account.name", "lakeacct"),
            ("adls.auth.shared-key.account.key", "AZUREKEY=="),
            ("fs.gs.auth.service.account.private.key", "GCSPRIVATEKEY"),
            ("header.X-Api-Key", "HEADERVALUE"),
        ] {
            catalog
                .properties
                .insert(key.to_string(), value.to_string());
        }
        let catalog = config.catalogs["lakehouse"].clone();
        let conf = spark_conf(&config.spark, "lakehouse", &catalog);
        let options = spark_sql_options(&config.spark);
        let args = command_line(&options, &conf, &["SELECT 1".to_string()], Some("/p"), None);
        let line = args.join(" ");
        let described = describe_args(&spark_sql_args(
            &config.spark,
            "lakehouse",
            &catalog,
            "SELECT 1",
        ));
        let file = secret_properties(&conf, "").unwrap();
        for secret in [
            "MASTERPW",
            "JDBCPW",
            "lakeacct",
            "AZUREKEY",
            "GCSPRIVATEKEY",
            "HEADERVALUE",
        ] {
            assert!(
                !line.contains(secret),
                "{secret} on the command line: {line}"
            );
            assert!(
                !described.contains(secret),
                "{secret} described: {described}"
            );
            assert!(
                file.contains(secret),
                "{secret} not in the secrets file: {file}"
            );
        }
        assert!(!args.contains(&"--master".to_string()), "{line}");
        assert!(
            file.contains("spark.master=spark://ops:MASTERPW@spark-master:7077\n"),
            "{file}"
        );
        assert!(
            line.contains(
                "--conf spark.sql.catalog.lakehouse.warehouse=s3://lakehouse-data/warehouse"
            ),
            "{line}"
        );
        assert!(
            described.contains("spark.sql.catalog.lakehouse.uri=jdbc:postgresql://db:5432/catalog?user=icepack&password=***"),
            "{described}"
        );
        assert!(
            described.contains("spark.sql.catalog.lakehouse.adls.auth.shared-key.account.key=***"),
            "{described}"
        );
    }

    #[test]
    fn passwords_in_urls_are_hidden() {
        assert_eq!(
            hide_secrets(
                "spark.sql.catalog.c.uri=jdbc:postgresql://icepack:hunter2@db:5432/catalog"
            ),
            "spark.sql.catalog.c.uri=jdbc:postgresql://icepack:***@db:5432/catalog"
        );
        assert_eq!(hide_secrets("http://host:8181/x"), "http://host:8181/x");
        let described = describe_args(&[
            "--conf".to_string(),
            "spark.x.uri=https://u:p4ss@h/".to_string(),
        ]);
        assert!(!described.contains("p4ss"), "{described}");
    }

    #[test]
    fn master_and_jars_come_first() {
        let mut config = Config::default();
        config.spark.master = "spark://spark-master:7077".to_string();
        config.spark.packages.clear();
        config.spark.jars = vec!["/jars/a.jar".to_string(), "/jars/b.jar".to_string()];
        let args = spark_sql_args(
            &config.spark,
            "lakehouse",
            &config.catalogs["lakehouse"],
            "x",
        );
        assert_eq!(
            args[..4],
            [
                "--master",
                "spark://spark-master:7077",
                "--jars",
                "/jars/a.jar,/jars/b.jar"
            ]
        );
        assert!(!args.contains(&"--packages".to_string()));
    }
}
