//! `[defaults]` and `[[tables]]`: what each table is compacted by, and its spec with every
//! default applied.

use super::*;

/// Declares the keys of a table's compaction once, as [`TableSettings`] (what `[defaults]`, a
/// tenant's `defaults` and a table each may set, every key optional) and inline in the
/// `[[tables]]` entry beside the keys only a table has. Inline, not `#[serde(flatten)]`: serde
/// cannot refuse unknown keys of a struct with a flattened field, and a misspelt key must be an
/// error that names it.
macro_rules! table_settings {
    (
        settings { $( $(#[$sdoc:meta])* $skey:ident: $sty:ty, )* }
        $(#[$emeta:meta])*
        pub struct $entry:ident { $( $(#[$edoc:meta])* $ekey:ident: $ety:ty, )* }
    ) => {
        /// The keys of a table's compaction that `[defaults]`, a tenant's `defaults` and the
        /// table's own `[[tables]]` entry may each set. A key the table leaves out is its
        /// tenant's, else `[defaults]`', else the built-in default ([`TableConfig::resolve`]).
        #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct TableSettings {
            $( $(#[$sdoc])* pub $skey: Option<$sty>, )*
        }

        impl TableSettings {
            /// Each key of `self`, else `fallback`'s.
            pub fn or(&self, fallback: &TableSettings) -> TableSettings {
                TableSettings {
                    $( $skey: self.$skey.clone().or_else(|| fallback.$skey.clone()), )*
                }
            }
        }

        $(#[$emeta])*
        pub struct $entry {
            $( $(#[$edoc])* pub $ekey: $ety, )*
            $( $(#[$sdoc])* pub $skey: Option<$sty>, )*
        }

        impl $entry {
            /// The settings the entry sets itself.
            pub fn settings(&self) -> TableSettings {
                TableSettings {
                    $( $skey: self.$skey.clone(), )*
                }
            }
        }
    };
}

table_settings! {
    settings {
        /// Files smaller than this are small files (64).
        small_file_mb: Mebibytes,
        /// A table is due with this many small files (10) ...
        min_files: FileCount,
        /// ... or this many MiB of them (256) ...
        min_total_mb: Mebibytes,
        /// `target-file-size-bytes` of the rewrite (512).
        target_file_mb: Mebibytes,
        /// ... or when its oldest small file has waited this long (120; 0 disables the time
        /// threshold).
        max_wait_minutes: WaitMinutes,
        /// Objects counted as data files end with one of these (`.parquet`).
        file_suffixes: Vec<String>,
        /// Pacing (docs/design.md, "Pacing"): when a due table's run starts. `"settle"` (the
        /// default): once files stop landing, at max-wait at the latest; `"cost"`: also weighed
        /// against what the run costs, never past max-wait; `"off"` (or `false`): as soon as a
        /// threshold is crossed, of the partitions the rewrite rule finds worth it.
        pacing: PacingMode,
        /// The pacing keys below that no level sets, by name: `"fresh"` (queries first, more
        /// runs), `"balanced"` (the default: the values in brackets) or `"thrifty"` (engine time
        /// first, fewer and larger runs); docs/configuration.md lists their values.
        pacing_profile: PacingProfile,
        /// With `pacing = "cost"`: what one run costs on the engine whatever it rewrites, in
        /// seconds. Absent: the table's measured run cost (the median of its recent successful
        /// runs), or before its first run the runner's estimate (90 for a container or
        /// spark-sql, 2 for a warm Spark Connect server or the native engine).
        run_cost_seconds: DaySeconds,
        /// What fixing one small file is worth, in engine seconds: a run waits for
        /// `run_cost_seconds / this` files it can fix (8; 0: no such wait).
        file_fix_value_seconds: DaySeconds,
        /// What one small file waiting an hour costs, in engine seconds: a run waits until the
        /// files it fixes have waited, together, `run_cost_seconds / this` hours (40; 0: no
        /// such wait).
        file_hour_cost_seconds: DaySeconds,
        /// A due table waits until no file has landed for this long (60; 0: off) ...
        settle_seconds: DaySeconds,
        /// ... but not past this long after the oldest pending file landed (300).
        settle_max_seconds: DaySeconds,
        /// A partition with no new file for this long is complete: its last small files merge
        /// into its mid-sized outputs (15; 0: never).
        quiet_partition_minutes: WaitMinutes,
        /// A partition holding one still-small output of an earlier run joins a run once its
        /// new files hold this share of the output's bytes, in percent (0: at once), or it is
        /// quiet or past max-wait.
        remerge_new_data_percent: Percent,
        /// A partition's small files join a run once they hold this share of a small file's
        /// size, in percent (0: at once), or it is quiet or past max-wait, so that what they
        /// merge into is no longer small. Absent: 100 when the run cost is at most 10 seconds
        /// (a warm engine), else 0.
        fragment_fill_percent: Percent,
        /// How runs rewrite: `binpack` (the default), `sort`, `zorder` or `auto` (sort a table
        /// that has a sort order, bin-pack the others). `sort_order` is per table.
        strategy: String,
        /// Which engine runs the table's runs: `spark` (the default), `native` or `auto`.
        engine: EngineChoice,
        /// Run `rewrite_manifests` when a table has more manifests than this, counted from
        /// their own S3 events and the metadata (0, the default: off).
        max_manifests: Threshold,
        /// Run `remove_orphan_files` this often (0, the default: off); the first run of a table
        /// is a dry run.
        remove_orphans_every_hours: Hours,
        /// Never remove files younger than this (72; at least 24: a running writer's files are
        /// not orphans yet).
        orphan_older_than_hours: Hours,
        /// A table with this many delete files (merge-on-read) is due; its run applies them
        /// (0, the default: off).
        delete_file_threshold: Threshold,
        /// A table whose deleted rows are this share of its rows (0 < x <= 1) is due (absent:
        /// off).
        delete_ratio_threshold: f64,
        /// After a run that changed the table's files, compute its statistics for query
        /// planners (`compute_table_stats`: Puffin NDV sketches; `compute_partition_stats`), as
        /// a run of its own (Spark procedures, Iceberg 1.10). Off by default.
        compute_statistics: bool,
    }

    /// One `[[tables]]` entry: where a table's files land, the keys only a table has, and its
    /// own [`TableSettings`].
    #[derive(Debug, Clone, Default, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct TableConfig {
        /// `namespace.table` in the Iceberg catalog (nested namespaces allowed: `a.b.table`).
        table: String,
        bucket: String,
        prefix: String,
        /// Spark catalog holding the table; `lakehouse` by default.
        catalog: Option<String>,
        /// `min-input-files` of `rewrite_data_files`; `min_files` by default.
        min_input_files: Option<FileCount>,
        /// A filter for `rewrite_data_files(where => ...)`, e.g. `order_date >= '2024-01-01'`.
        #[serde(rename = "where")]
        where_filter: Option<String>,
        /// `partial-progress.enabled`: commit file groups as they finish; unset, only in the
        /// runs after one lost to a commit conflict ([`crate::table::policy::commits_per_group`]).
        partial_progress: Option<bool>,
        /// Run `expire_snapshots` after a successful rewrite, for snapshots older than this.
        expire_snapshots_older_than_hours: Option<PositiveHours>,
        /// Rebuild the pending state from the table's metadata this often, events or not (off).
        reconcile_every_hours: Option<PositiveHours>,
        /// The `[tenants.<name>]` owning the table; required when tenants are configured.
        tenant: Option<String>,
        /// For `sort`: `col1 DESC NULLS LAST, col2` (the table's own order when left out); for
        /// `zorder`: `zorder(col1, col2)`.
        sort_order: Option<String>,
        /// Further `rewrite_data_files` options (`max-file-group-size-bytes`,
        /// `shuffle-partitions-per-file`, ...); icepack's own keys are refused.
        #[serde(default)]
        options: BTreeMap<String, String>,
        /// `retain_last` of the `expire_snapshots` follow-up (Iceberg's default: 1).
        expire_snapshots_retain_last: Option<FileCount>,
    }
}

pub(super) fn default_orphan_older_than_hours() -> Hours {
    Int::new(72)
}

/// Below this, `orphan_older_than_hours` is refused.
pub(super) const MIN_ORPHAN_AGE_HOURS: u64 = 24;

/// The strategy of a table that names none.
pub(super) const DEFAULT_STRATEGY: &str = "binpack";

pub(super) fn default_small_file_mb() -> Mebibytes {
    Int::new(64)
}

pub(super) fn default_min_files() -> FileCount {
    Int::new(10)
}

pub(super) fn default_min_total_mb() -> Mebibytes {
    Int::new(256)
}

pub(super) fn default_target_file_mb() -> Mebibytes {
    Int::new(512)
}

pub(super) fn default_max_wait_minutes() -> WaitMinutes {
    Int::new(120)
}

pub(super) fn default_file_suffixes() -> Vec<String> {
    vec![".parquet".to_string()]
}

impl TableSettings {
    /// The pacing of a table whose keys are these (each unset one its profile's).
    pub fn pacing(&self) -> crate::model::policy::PacingSpec {
        let mode = self.pacing.unwrap_or_default();
        if mode == PacingMode::Off {
            return crate::model::policy::PacingSpec::OFF;
        }
        let profile = self.pacing_profile.unwrap_or_default().values();
        crate::model::policy::PacingSpec {
            mode,
            run_cost_millis: self.run_cost_seconds.map(|seconds| seconds.get() * 1000),
            estimated_run_cost_millis: COLD_RUN_COST_SECONDS * 1000,
            file_fix_value_millis: self
                .file_fix_value_seconds
                .unwrap_or(profile.file_fix_value_seconds)
                .get()
                * 1000,
            file_hour_cost_millis: self
                .file_hour_cost_seconds
                .unwrap_or(profile.file_hour_cost_seconds)
                .get()
                * 1000,
            settle_millis: self
                .settle_seconds
                .unwrap_or(profile.settle_seconds)
                .millis(1000),
            settle_max_millis: self
                .settle_max_seconds
                .unwrap_or(profile.settle_max_seconds)
                .millis(1000),
            quiet_millis: self
                .quiet_partition_minutes
                .unwrap_or(profile.quiet_partition_minutes)
                .millis(60_000),
            remerge_percent: self
                .remerge_new_data_percent
                .unwrap_or(profile.remerge_new_data_percent)
                .get(),
            fragment_percent: self
                .fragment_fill_percent
                .or(profile.fragment_fill_percent)
                .map(Int::get),
        }
    }

    /// The strategy's name: the key's, else `binpack`.
    pub fn strategy_name(&self) -> &str {
        self.strategy.as_deref().unwrap_or(DEFAULT_STRATEGY)
    }

    /// Checks what the keys' types do not (their ranges are checked as they are read), each
    /// named under `key` (`defaults`, `tenants.x.defaults`, `tables[3]`).
    pub(super) fn validate(&self, key: &str) -> Result<(), ConfigError> {
        if let Some(hours) = self.orphan_older_than_hours {
            check_orphan_age(&format!("{key}.orphan_older_than_hours"), hours)?;
        }
        if let Some(suffixes) = &self.file_suffixes {
            check_suffixes(&format!("{key}.file_suffixes"), suffixes)?;
        }
        if let Some(strategy) = &self.strategy {
            check_strategy_name(&format!("{key}.strategy"), strategy)?;
        }
        if let Some(ratio) = self.delete_ratio_threshold {
            check_ratio(&format!("{key}.delete_ratio_threshold"), ratio)?;
        }
        Ok(())
    }
}

/// What a run costs on an engine that starts a JVM and a Spark session per run (a container,
/// `spark-sql`), in seconds: the cost pacing's estimate before a table's first run is measured.
pub const COLD_RUN_COST_SECONDS: u64 = 90;

/// The same on a warm Spark Connect server (a run is a statement on a running session).
pub const WARM_RUN_COST_SECONDS: u64 = 2;

/// Options of `rewrite_data_files` that icepack sets from its own keys.
pub(super) const OWNED_REWRITE_OPTIONS: [&str; 4] = [
    "target-file-size-bytes",
    "min-input-files",
    "min-file-size-bytes",
    "partial-progress.enabled",
];

/// A table with every default applied: what the rest of icepack works with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSpec {
    pub table: String,
    pub bucket: String,
    pub prefix: String,
    pub thresholds: Thresholds,
    pub target_file_bytes: u64,
    pub file_suffixes: Vec<String>,
    pub catalog: String,
    pub min_input_files: u64,
    pub where_filter: Option<String>,
    /// `None`: per group after a lost race only ([`crate::table::policy::commits_per_group`]).
    pub partial_progress: Option<bool>,
    pub expire_snapshots_older_than_hours: Option<u64>,
    pub reconcile_every_millis: Option<i64>,
    pub tenant: String,
    /// When a due table's run starts: the settle window, and with `pacing = "cost"` its cost
    /// against the files it fixes (resolved with the table's measured run cost).
    pub pacing: crate::model::policy::PacingSpec,
    pub strategy: crate::model::strategy::Strategy,
    /// Which engine runs the table's runs.
    pub engine: EngineChoice,
    /// `options` of the table's `[[tables]]` entry.
    pub rewrite_options: BTreeMap<String, String>,
    /// `rewrite_manifests` past this many manifests (`None`: off).
    pub max_manifests: Option<u64>,
    /// `remove_orphan_files` this often (`None`: off), for files older than the hours.
    pub remove_orphans_every_millis: Option<i64>,
    pub orphan_older_than_hours: u64,
    pub expire_snapshots_retain_last: Option<u64>,
    /// Due by delete files: their number, or deleted rows per million rows (`None`: off).
    pub deletes: DeleteThresholds,
    /// Runs kept in the table's history (`service.run_history`).
    pub run_history: u64,
    /// A `compute_statistics` run after each run that changed the table's files.
    pub compute_statistics: bool,
}

pub use crate::model::state::DeleteThresholds;

impl TableSpec {
    pub fn rewrite_rule(&self) -> crate::model::policy::RewriteRule {
        crate::model::policy::RewriteRule {
            min_input_files: self.min_input_files,
            target_file_bytes: self.target_file_bytes,
        }
    }

    /// `min-file-size-bytes` of a run: the files it may rewrite. The small files icepack counts,
    /// and no larger ones — an output that is no longer small is not rewritten again and again —
    /// unless a partition has gone quiet (`joins_mid_sized`): then Iceberg's default (three
    /// quarters of the target, `None`), so its last small files merge into its mid-sized
    /// outputs instead of staying small. `None` too when the small-file size is not below the
    /// target (Iceberg requires the floor below it).
    pub fn rewrite_floor_bytes(&self, joins_mid_sized: bool) -> Option<u64> {
        let small = self.thresholds.small_file_bytes;
        (!joins_mid_sized && small < self.target_file_bytes).then_some(small)
    }

    /// A spec with compaction defaults, for tests and benchmarks.
    #[doc(hidden)]
    pub fn for_tests(table: &str, bucket: &str, prefix: &str, thresholds: Thresholds) -> TableSpec {
        TableSpec {
            table: table.to_string(),
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
            thresholds,
            target_file_bytes: 512 * MIB,
            file_suffixes: vec![".parquet".to_string()],
            catalog: DEFAULT_CATALOG.to_string(),
            min_input_files: thresholds.min_files,
            where_filter: None,
            partial_progress: None,
            expire_snapshots_older_than_hours: None,
            reconcile_every_millis: None,
            tenant: DEFAULT_TENANT.to_string(),
            pacing: crate::model::policy::PacingSpec::OFF,
            strategy: crate::model::strategy::Strategy::Binpack,
            engine: EngineChoice::Spark,
            rewrite_options: BTreeMap::new(),
            max_manifests: None,
            remove_orphans_every_millis: None,
            orphan_older_than_hours: default_orphan_older_than_hours().get(),
            expire_snapshots_retain_last: None,
            deletes: DeleteThresholds::default(),
            run_history: default_run_history().get(),
            compute_statistics: false,
        }
    }
}

impl TableConfig {
    pub(super) fn validate(&self, key: &str) -> Result<(), ConfigError> {
        validate_table_identifier(&self.table)
            .map_err(|reason| ConfigError::Invalid(format!("{key}.table: {reason}")))?;
        validate_bucket(&self.bucket)
            .map_err(|reason| ConfigError::Invalid(format!("{key}.bucket: {reason}")))?;
        if self.prefix.starts_with('/') {
            return invalid(format!(
                "{key}.prefix: S3 keys do not start with `/`, got `{}`",
                self.prefix
            ));
        }
        if self.prefix.split('/').any(|segment| segment == "..") {
            return invalid(format!(
                "{key}.prefix: must not contain `..` segments, got `{}`",
                self.prefix
            ));
        }
        self.settings().validate(key)?;
        for (option, value) in &self.options {
            let well_formed = !option.is_empty()
                && option.len() <= 128
                && option
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
            if !well_formed {
                return invalid(format!(
                    "{key}.options: `{}` is not an option name of rewrite_data_files (lower case, digits, `-`, `.`)",
                    option.escape_debug()
                ));
            }
            if OWNED_REWRITE_OPTIONS.contains(&option.as_str()) {
                return invalid(format!(
                    "{key}.options.{option}: set by icepack from the table's own keys (target_file_mb, min_input_files, small_file_mb, partial_progress)"
                ));
            }
            if value.is_empty() || value.len() > 1024 || value.chars().any(char::is_control) {
                return invalid(format!(
                    "{key}.options.{option}: must be one line of 1 to 1024 characters"
                ));
            }
        }
        if let Some(filter) = &self.where_filter {
            if filter.trim().is_empty()
                || filter.chars().any(char::is_control)
                || filter.len() > 4096
            {
                return invalid(format!(
                    "{key}.where: must be a one-line filter expression of at most 4096 characters"
                ));
            }
        }
        if let Some(catalog) = &self.catalog {
            if !crate::base::sql_text::is_safe_identifier(catalog) {
                return invalid(format!(
                    "{key}.catalog: `{}` is not a valid catalog name",
                    catalog.escape_debug()
                ));
            }
        }
        Ok(())
    }

    /// The table's settings: its own keys, else its tenant's, else `[defaults]`' (the
    /// built-in default where none sets a key is applied by [`TableConfig::resolve`]).
    pub(super) fn merged(&self, defaults: &TableSettings, tenant: &TableSettings) -> TableSettings {
        self.settings().or(tenant).or(defaults)
    }

    /// The table's strategy with its sort order.
    pub(super) fn strategy(
        &self,
        settings: &TableSettings,
    ) -> Result<crate::model::strategy::Strategy, String> {
        crate::model::strategy::Strategy::parse(
            settings.strategy_name(),
            self.sort_order.as_deref(),
        )
    }

    /// The table with every key resolved: its own, else the tenant's, else `[defaults]`', else
    /// the built-in default.
    pub(super) fn resolve(
        &self,
        defaults: &TableSettings,
        tenant: &TableSettings,
        tenant_name: &str,
    ) -> TableSpec {
        let settings = self.merged(defaults, tenant);
        let mib = |value: Mebibytes| value.get() * MIB;
        let max_wait = settings
            .max_wait_minutes
            .unwrap_or_else(default_max_wait_minutes);
        let min_files = settings.min_files.unwrap_or_else(default_min_files);
        TableSpec {
            table: self.table.clone(),
            bucket: self.bucket.clone(),
            prefix: self.prefix.clone(),
            thresholds: Thresholds {
                small_file_bytes: mib(settings.small_file_mb.unwrap_or_else(default_small_file_mb)),
                min_files: min_files.get(),
                min_total_bytes: mib(settings.min_total_mb.unwrap_or_else(default_min_total_mb)),
                max_wait_millis: (max_wait.get() > 0).then(|| max_wait.millis(60_000)),
            },
            target_file_bytes: mib(settings
                .target_file_mb
                .unwrap_or_else(default_target_file_mb)),
            file_suffixes: settings
                .file_suffixes
                .clone()
                .unwrap_or_else(default_file_suffixes),
            catalog: self
                .catalog
                .clone()
                .unwrap_or_else(|| DEFAULT_CATALOG.to_string()),
            min_input_files: self.min_input_files.unwrap_or(min_files).get(),
            where_filter: self.where_filter.clone(),
            partial_progress: self.partial_progress,
            expire_snapshots_older_than_hours: self.expire_snapshots_older_than_hours.map(Int::get),
            reconcile_every_millis: self
                .reconcile_every_hours
                .map(|hours| hours.millis(3_600_000)),
            tenant: tenant_name.to_string(),
            pacing: settings.pacing(),
            strategy: self
                .strategy(&settings)
                .expect("the strategy is validated with the configuration"),
            engine: settings.engine.unwrap_or_default(),
            rewrite_options: self.options.clone(),
            max_manifests: settings.max_manifests.and_then(Int::nonzero),
            remove_orphans_every_millis: settings
                .remove_orphans_every_hours
                .filter(|every| every.get() > 0)
                .map(|every| every.millis(3_600_000)),
            orphan_older_than_hours: settings
                .orphan_older_than_hours
                .unwrap_or_else(default_orphan_older_than_hours)
                .get(),
            expire_snapshots_retain_last: self.expire_snapshots_retain_last.map(Int::get),
            run_history: default_run_history().get(),
            compute_statistics: settings.compute_statistics.unwrap_or(false),
            deletes: DeleteThresholds {
                files: settings.delete_file_threshold.and_then(Int::nonzero),
                ratio_ppm: settings
                    .delete_ratio_threshold
                    .map(|ratio| (ratio * 1_000_000.0).round() as u64),
            },
        }
    }
}

/// `namespace.table`: two or more dot-separated parts of ASCII letters, digits and `_`, not starting
/// with a digit. Strict on purpose: the identifier ends up in SQL and in container labels.
pub fn validate_table_identifier(identifier: &str) -> Result<(), String> {
    let parts: Vec<&str> = identifier.split('.').collect();
    if parts.len() < 2 {
        return Err(format!(
            "expected `namespace.table`, got `{}`",
            identifier.escape_debug()
        ));
    }
    for part in parts {
        let valid = !part.is_empty()
            && part.len() <= 128
            && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !part.starts_with(|c: char| c.is_ascii_digit());
        if !valid {
            return Err(format!(
                "`{}` is not a valid identifier: each part of `namespace.table` is letters, digits and `_`, not starting with a digit",
                identifier.escape_debug()
            ));
        }
    }
    Ok(())
}

pub(super) fn validate_bucket(bucket: &str) -> Result<(), String> {
    let valid = (3..=63).contains(&bucket.len())
        && bucket
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && bucket.starts_with(|c: char| c.is_ascii_alphanumeric())
        && bucket.ends_with(|c: char| c.is_ascii_alphanumeric());
    if valid {
        Ok(())
    } else {
        Err(format!(
            "`{}` is not a valid S3 bucket name (3-63 lowercase letters, digits, `-` and `.`)",
            bucket.escape_debug()
        ))
    }
}

pub(super) fn check_ratio(key: &str, ratio: f64) -> Result<(), ConfigError> {
    if ratio > 0.0 && ratio <= 1.0 {
        Ok(())
    } else {
        invalid(format!(
            "{key}: a share of the table's rows above 0 and at most 1 (Iceberg's default is 0.3), got {ratio}"
        ))
    }
}

pub(super) fn check_orphan_age(key: &str, hours: Hours) -> Result<(), ConfigError> {
    if hours.get() >= MIN_ORPHAN_AGE_HOURS {
        Ok(())
    } else {
        invalid(format!(
            "{key}: at least {MIN_ORPHAN_AGE_HOURS} hours (a running writer's files are not orphans yet), got {hours}"
        ))
    }
}

pub(super) fn check_strategy_name(key: &str, name: &str) -> Result<(), ConfigError> {
    if crate::model::strategy::STRATEGY_NAMES.contains(&name) {
        Ok(())
    } else {
        invalid(format!(
            "{key}: must be one of {}, got `{}`",
            crate::model::strategy::STRATEGY_NAMES.join(", "),
            name.escape_debug()
        ))
    }
}

pub(super) fn check_suffixes(key: &str, suffixes: &[String]) -> Result<(), ConfigError> {
    if suffixes.is_empty() || suffixes.iter().any(|suffix| suffix.is_empty()) {
        return invalid(format!("{key}: must list at least one non-empty suffix"));
    }
    Ok(())
}
