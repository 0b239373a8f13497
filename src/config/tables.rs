//! `[defaults]` and `[[tables]]`: what each table is compacted by, and its spec with every
//! default applied.

use super::*;

/// Threshold defaults; every key may be overridden per table.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableDefaults {
    #[serde(default = "default_small_file_mb")]
    pub small_file_mb: Mebibytes,
    #[serde(default = "default_min_files")]
    pub min_files: FileCount,
    #[serde(default = "default_min_total_mb")]
    pub min_total_mb: Mebibytes,
    #[serde(default = "default_target_file_mb")]
    pub target_file_mb: Mebibytes,
    /// 0 disables the time threshold.
    #[serde(default = "default_max_wait_minutes")]
    pub max_wait_minutes: WaitMinutes,
    #[serde(default = "default_file_suffixes")]
    pub file_suffixes: Vec<String>,
    /// Pacing (docs/design.md, "Pacing"): when a due table's run starts. `"settle"` (the
    /// default): once files stop landing, at max-wait at the latest; `"cost"`: also weighed
    /// against what the run costs, never past max-wait; `"off"` (or `false`): as soon as a
    /// threshold is crossed, of the partitions the rewrite rule finds worth it.
    #[serde(default)]
    pub pacing: PacingMode,
    /// With `pacing = "cost"`: what one run costs on the engine whatever it rewrites, in
    /// seconds. Absent: the table's measured run cost (the median of its recent successful
    /// runs), or before its first run the runner's estimate (90 for a container or spark-sql,
    /// 2 for a warm Spark Connect server).
    #[serde(default)]
    pub run_cost_seconds: Option<DaySeconds>,
    /// What fixing one small file is worth, in engine seconds: a run waits for
    /// `run_cost_seconds / this` files it can fix (0: no such wait).
    #[serde(default = "default_file_fix_value_seconds")]
    pub file_fix_value_seconds: DaySeconds,
    /// What one small file waiting an hour costs, in engine seconds: a run waits until the
    /// files it fixes have waited, together, `run_cost_seconds / this` hours (0: no such wait).
    #[serde(default = "default_file_hour_cost_seconds")]
    pub file_hour_cost_seconds: DaySeconds,
    /// A due table waits until no file has landed for this long (0: off) ...
    #[serde(default = "default_settle_seconds")]
    pub settle_seconds: DaySeconds,
    /// ... but not past this long after the oldest pending file landed.
    #[serde(default = "default_settle_max_seconds")]
    pub settle_max_seconds: DaySeconds,
    /// A partition with no new file for this long is complete: its last small files merge
    /// into its mid-sized outputs (0: never).
    #[serde(default = "default_quiet_partition_minutes")]
    pub quiet_partition_minutes: WaitMinutes,
    /// A partition holding one still-small output of an earlier run joins a run once its new
    /// files hold this share of the output's bytes, in percent (0: at once), or it is quiet or
    /// past max-wait.
    #[serde(default = "default_remerge_new_data_percent")]
    pub remerge_new_data_percent: Percent,
    /// A partition's small files join a run once they hold this share of a small file's size,
    /// in percent (0: at once), or it is quiet or past max-wait, so that what they merge into is
    /// no longer small. Absent: 100 when `run_cost_seconds` is at most 10 (a warm engine), else 0.
    #[serde(default)]
    pub fragment_fill_percent: Option<Percent>,
    /// How runs rewrite: `binpack`, `sort`, `zorder` or `auto` (sort a table that has a sort
    /// order, bin-pack the others). `sort_order` is per table.
    #[serde(default = "default_strategy")]
    pub strategy: String,
    /// Which engine runs the table's runs: `spark` (the default), `native` or `auto`.
    #[serde(default)]
    pub engine: EngineChoice,
    /// Run `rewrite_manifests` when a table has more manifests than this, counted from their
    /// own S3 events and the metadata (0: off).
    #[serde(default)]
    pub max_manifests: Threshold,
    /// Run `remove_orphan_files` this often (0: off); the first run of a table is a dry run.
    #[serde(default)]
    pub remove_orphans_every_hours: Hours,
    /// Never remove files younger than this (at least 24: a running writer's files are not
    /// orphans yet).
    #[serde(default = "default_orphan_older_than_hours")]
    pub orphan_older_than_hours: Hours,
    /// A table with this many delete files (merge-on-read) is due; its run applies them (0: off).
    #[serde(default)]
    pub delete_file_threshold: Threshold,
    /// A table whose deleted rows are this share of its rows (0 < x <= 1) is due (absent: off).
    #[serde(default)]
    pub delete_ratio_threshold: Option<f64>,
    /// After a run that changed the table's files, compute its statistics for query planners
    /// (`compute_table_stats`: Puffin NDV sketches; `compute_partition_stats`), as a run of its
    /// own (Spark procedures, Iceberg 1.10). Off by default.
    #[serde(default)]
    pub compute_statistics: bool,
}

pub(super) fn default_orphan_older_than_hours() -> Hours {
    Int::new(72)
}

/// Below this, `orphan_older_than_hours` is refused.
pub(super) const MIN_ORPHAN_AGE_HOURS: u64 = 24;

pub(super) fn default_strategy() -> String {
    "binpack".to_string()
}

pub(super) fn default_file_fix_value_seconds() -> DaySeconds {
    Int::new(8)
}

pub(super) fn default_file_hour_cost_seconds() -> DaySeconds {
    Int::new(40)
}

pub(super) fn default_settle_seconds() -> DaySeconds {
    Int::new(60)
}

pub(super) fn default_settle_max_seconds() -> DaySeconds {
    Int::new(300)
}

pub(super) fn default_quiet_partition_minutes() -> WaitMinutes {
    Int::new(15)
}

pub(super) fn default_remerge_new_data_percent() -> Percent {
    Int::new(0)
}

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

impl TableDefaults {
    /// The pacing of a table that sets none of its keys.
    pub fn pacing(&self) -> crate::policy::PacingSpec {
        TableConfig::default().pacing(self, &TenantDefaults::default())
    }
}

impl Default for TableDefaults {
    fn default() -> Self {
        TableDefaults {
            small_file_mb: default_small_file_mb(),
            min_files: default_min_files(),
            min_total_mb: default_min_total_mb(),
            target_file_mb: default_target_file_mb(),
            max_wait_minutes: default_max_wait_minutes(),
            file_suffixes: default_file_suffixes(),
            pacing: PacingMode::default(),
            run_cost_seconds: None,
            file_fix_value_seconds: default_file_fix_value_seconds(),
            file_hour_cost_seconds: default_file_hour_cost_seconds(),
            settle_seconds: default_settle_seconds(),
            settle_max_seconds: default_settle_max_seconds(),
            quiet_partition_minutes: default_quiet_partition_minutes(),
            remerge_new_data_percent: default_remerge_new_data_percent(),
            fragment_fill_percent: None,
            strategy: default_strategy(),
            engine: EngineChoice::default(),
            max_manifests: Int::new(0),
            remove_orphans_every_hours: Int::new(0),
            orphan_older_than_hours: default_orphan_older_than_hours(),
            delete_file_threshold: Int::new(0),
            delete_ratio_threshold: None,
            compute_statistics: false,
        }
    }
}

/// One `[[tables]]` entry: where a table's files land, and its threshold overrides.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableConfig {
    /// `namespace.table` in the Iceberg catalog (nested namespaces allowed: `a.b.table`).
    pub table: String,
    pub bucket: String,
    pub prefix: String,
    pub small_file_mb: Option<Mebibytes>,
    pub min_files: Option<FileCount>,
    pub min_total_mb: Option<Mebibytes>,
    pub target_file_mb: Option<Mebibytes>,
    pub max_wait_minutes: Option<WaitMinutes>,
    pub file_suffixes: Option<Vec<String>>,
    /// Spark catalog holding the table; `lakehouse` by default.
    pub catalog: Option<String>,
    /// `min-input-files` of `rewrite_data_files`; `min_files` by default.
    pub min_input_files: Option<FileCount>,
    /// A filter for `rewrite_data_files(where => ...)`, e.g. `order_date >= '2024-01-01'`.
    #[serde(rename = "where")]
    pub where_filter: Option<String>,
    /// `partial-progress.enabled`: commit file groups as they finish; unset, only in the runs
    /// after one lost to a commit conflict ([`crate::policy::commits_per_group`]).
    pub partial_progress: Option<bool>,
    /// Run `expire_snapshots` after a successful rewrite, for snapshots older than this.
    pub expire_snapshots_older_than_hours: Option<PositiveHours>,
    /// Rebuild the pending state from the table's metadata this often, events or not (off).
    pub reconcile_every_hours: Option<PositiveHours>,
    /// The `[tenants.<name>]` owning the table; required when tenants are configured.
    pub tenant: Option<String>,
    pub pacing: Option<PacingMode>,
    pub run_cost_seconds: Option<DaySeconds>,
    pub file_fix_value_seconds: Option<DaySeconds>,
    pub file_hour_cost_seconds: Option<DaySeconds>,
    pub settle_seconds: Option<DaySeconds>,
    pub settle_max_seconds: Option<DaySeconds>,
    pub quiet_partition_minutes: Option<WaitMinutes>,
    pub remerge_new_data_percent: Option<Percent>,
    pub fragment_fill_percent: Option<Percent>,
    /// `binpack`, `sort`, `zorder` or `auto`; the tenant's, else `[defaults]`, by default.
    pub strategy: Option<String>,
    /// `spark`, `native` or `auto`; the tenant's, else `[defaults]`, by default.
    pub engine: Option<EngineChoice>,
    /// For `sort`: `col1 DESC NULLS LAST, col2` (the table's own order when left out); for
    /// `zorder`: `zorder(col1, col2)`.
    pub sort_order: Option<String>,
    /// Further `rewrite_data_files` options (`max-file-group-size-bytes`,
    /// `shuffle-partitions-per-file`, ...); icepack's own keys are refused.
    #[serde(default)]
    pub options: BTreeMap<String, String>,
    /// `rewrite_manifests` past this many manifests; the tenant's, else `[defaults]`, by default.
    pub max_manifests: Option<Threshold>,
    pub remove_orphans_every_hours: Option<Hours>,
    pub orphan_older_than_hours: Option<Hours>,
    /// `retain_last` of the `expire_snapshots` follow-up (Iceberg's default: 1).
    pub expire_snapshots_retain_last: Option<FileCount>,
    pub delete_file_threshold: Option<Threshold>,
    pub delete_ratio_threshold: Option<f64>,
    /// `compute_table_stats` and `compute_partition_stats` after a run that changed the table;
    /// the tenant's, else `[defaults]`, by default.
    pub compute_statistics: Option<bool>,
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
    /// `None`: per group after a lost race only ([`crate::policy::commits_per_group`]).
    pub partial_progress: Option<bool>,
    pub expire_snapshots_older_than_hours: Option<u64>,
    pub reconcile_every_millis: Option<i64>,
    pub tenant: String,
    /// When a due table's run starts: the settle window, and with `pacing = "cost"` its cost
    /// against the files it fixes (resolved with the table's measured run cost).
    pub pacing: crate::policy::PacingSpec,
    pub strategy: crate::strategy::Strategy,
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

pub use crate::state::DeleteThresholds;

impl TableSpec {
    pub fn rewrite_rule(&self) -> crate::policy::RewriteRule {
        crate::policy::RewriteRule {
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
            pacing: crate::policy::PacingSpec::OFF,
            strategy: crate::strategy::Strategy::Binpack,
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

impl TableDefaults {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        check_orphan_age(
            "defaults.orphan_older_than_hours",
            self.orphan_older_than_hours,
        )?;
        if let Some(ratio) = self.delete_ratio_threshold {
            check_ratio("defaults.delete_ratio_threshold", ratio)?;
        }
        check_strategy_name("defaults.strategy", &self.strategy)?;
        check_suffixes("defaults.file_suffixes", &self.file_suffixes)
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
        TenantDefaults {
            small_file_mb: self.small_file_mb,
            min_files: self.min_files,
            min_total_mb: self.min_total_mb,
            target_file_mb: self.target_file_mb,
            max_wait_minutes: self.max_wait_minutes,
            file_suffixes: self.file_suffixes.clone(),
            pacing: self.pacing,
            run_cost_seconds: self.run_cost_seconds,
            file_fix_value_seconds: self.file_fix_value_seconds,
            file_hour_cost_seconds: self.file_hour_cost_seconds,
            settle_seconds: self.settle_seconds,
            settle_max_seconds: self.settle_max_seconds,
            quiet_partition_minutes: self.quiet_partition_minutes,
            remerge_new_data_percent: self.remerge_new_data_percent,
            fragment_fill_percent: self.fragment_fill_percent,
            strategy: self.strategy.clone(),
            engine: self.engine,
            max_manifests: self.max_manifests,
            remove_orphans_every_hours: self.remove_orphans_every_hours,
            orphan_older_than_hours: self.orphan_older_than_hours,
            delete_file_threshold: self.delete_file_threshold,
            compute_statistics: self.compute_statistics,
        }
        .validate(key)?;
        if let Some(ratio) = self.delete_ratio_threshold {
            check_ratio(&format!("{key}.delete_ratio_threshold"), ratio)?;
        }
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
            if !crate::sql_text::is_safe_identifier(catalog) {
                return invalid(format!(
                    "{key}.catalog: `{}` is not a valid catalog name",
                    catalog.escape_debug()
                ));
            }
        }
        Ok(())
    }

    /// The table's pacing: its keys, else the tenant's, else `[defaults]`. The runner's run
    /// cost estimate is the configuration's to set ([`Config::table_specs`]).
    pub(super) fn pacing(
        &self,
        defaults: &TableDefaults,
        tenant: &TenantDefaults,
    ) -> crate::policy::PacingSpec {
        let mode = self.pacing.or(tenant.pacing).unwrap_or(defaults.pacing);
        if mode == PacingMode::Off {
            return crate::policy::PacingSpec::OFF;
        }
        crate::policy::PacingSpec {
            mode,
            run_cost_millis: self
                .run_cost_seconds
                .or(tenant.run_cost_seconds)
                .or(defaults.run_cost_seconds)
                .map(|seconds| seconds.get() * 1000),
            estimated_run_cost_millis: COLD_RUN_COST_SECONDS * 1000,
            file_fix_value_millis: pick(
                self.file_fix_value_seconds,
                tenant.file_fix_value_seconds,
                defaults.file_fix_value_seconds,
            )
            .get()
                * 1000,
            file_hour_cost_millis: pick(
                self.file_hour_cost_seconds,
                tenant.file_hour_cost_seconds,
                defaults.file_hour_cost_seconds,
            )
            .get()
                * 1000,
            settle_millis: pick(
                self.settle_seconds,
                tenant.settle_seconds,
                defaults.settle_seconds,
            )
            .millis(1000),
            settle_max_millis: pick(
                self.settle_max_seconds,
                tenant.settle_max_seconds,
                defaults.settle_max_seconds,
            )
            .millis(1000),
            quiet_millis: pick(
                self.quiet_partition_minutes,
                tenant.quiet_partition_minutes,
                defaults.quiet_partition_minutes,
            )
            .millis(60_000),
            remerge_percent: pick(
                self.remerge_new_data_percent,
                tenant.remerge_new_data_percent,
                defaults.remerge_new_data_percent,
            )
            .get(),
            fragment_percent: self
                .fragment_fill_percent
                .or(tenant.fragment_fill_percent)
                .or(defaults.fragment_fill_percent)
                .map(Int::get),
        }
    }

    /// The table's strategy with its sort order: its key, else the tenant's, else `[defaults]`.
    pub(super) fn strategy(
        &self,
        defaults: &TableDefaults,
        tenant: &TenantDefaults,
    ) -> Result<crate::strategy::Strategy, String> {
        let name = self
            .strategy
            .as_deref()
            .or(tenant.strategy.as_deref())
            .unwrap_or(&defaults.strategy);
        crate::strategy::Strategy::parse(name, self.sort_order.as_deref())
    }

    /// Applies the tenant's defaults, then `[defaults]`, to every key the table leaves out.
    pub(super) fn resolve(
        &self,
        defaults: &TableDefaults,
        tenant: &TenantDefaults,
        tenant_name: &str,
    ) -> TableSpec {
        let mib = |value: Mebibytes| value.get() * MIB;
        let max_wait = pick(
            self.max_wait_minutes,
            tenant.max_wait_minutes,
            defaults.max_wait_minutes,
        );
        let min_files = pick(self.min_files, tenant.min_files, defaults.min_files);
        TableSpec {
            table: self.table.clone(),
            bucket: self.bucket.clone(),
            prefix: self.prefix.clone(),
            thresholds: Thresholds {
                small_file_bytes: mib(pick(
                    self.small_file_mb,
                    tenant.small_file_mb,
                    defaults.small_file_mb,
                )),
                min_files: min_files.get(),
                min_total_bytes: mib(pick(
                    self.min_total_mb,
                    tenant.min_total_mb,
                    defaults.min_total_mb,
                )),
                max_wait_millis: (max_wait.get() > 0).then(|| max_wait.millis(60_000)),
            },
            target_file_bytes: mib(pick(
                self.target_file_mb,
                tenant.target_file_mb,
                defaults.target_file_mb,
            )),
            file_suffixes: self
                .file_suffixes
                .clone()
                .or_else(|| tenant.file_suffixes.clone())
                .unwrap_or_else(|| defaults.file_suffixes.clone()),
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
            pacing: self.pacing(defaults, tenant),
            strategy: self
                .strategy(defaults, tenant)
                .expect("the strategy is validated with the configuration"),
            engine: self.engine.or(tenant.engine).unwrap_or(defaults.engine),
            rewrite_options: self.options.clone(),
            max_manifests: pick(
                self.max_manifests,
                tenant.max_manifests,
                defaults.max_manifests,
            )
            .nonzero(),
            remove_orphans_every_millis: Some(pick(
                self.remove_orphans_every_hours,
                tenant.remove_orphans_every_hours,
                defaults.remove_orphans_every_hours,
            ))
            .filter(|every| every.get() > 0)
            .map(|every| every.millis(3_600_000)),
            orphan_older_than_hours: pick(
                self.orphan_older_than_hours,
                tenant.orphan_older_than_hours,
                defaults.orphan_older_than_hours,
            )
            .get(),
            expire_snapshots_retain_last: self.expire_snapshots_retain_last.map(Int::get),
            run_history: default_run_history().get(),
            compute_statistics: self
                .compute_statistics
                .or(tenant.compute_statistics)
                .unwrap_or(defaults.compute_statistics),
            deletes: DeleteThresholds {
                files: pick(
                    self.delete_file_threshold,
                    tenant.delete_file_threshold,
                    defaults.delete_file_threshold,
                )
                .nonzero(),
                ratio_ppm: self
                    .delete_ratio_threshold
                    .or(defaults.delete_ratio_threshold)
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

/// A key's value for a table: its own, else its tenant's, else `[defaults]`.
pub(super) fn pick<const LO: u64, const HI: u64>(
    table: Option<Int<LO, HI>>,
    tenant: Option<Int<LO, HI>>,
    default: Int<LO, HI>,
) -> Int<LO, HI> {
    table.or(tenant).unwrap_or(default)
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
    if crate::strategy::STRATEGY_NAMES.contains(&name) {
        Ok(())
    } else {
        invalid(format!(
            "{key}: must be one of {}, got `{}`",
            crate::strategy::STRATEGY_NAMES.join(", "),
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
