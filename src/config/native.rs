//! `engine` (per table, tenant or `[defaults]`) and `[native]`: which engine runs a table's
//! maintenance, and what the JVM-free engine may use.

use super::*;

/// Which engine runs a table's runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EngineChoice {
    /// Apache Spark (`[spark]`): every run. The default, so that an upgrade never moves a
    /// deployment's runs into icepack's own process unasked.
    #[default]
    Spark,
    /// The JVM-free engine in icepack's process: bin-pack and sort rewrites and reconciles of
    /// tables in a REST, Glue or JDBC catalog on S3 or a local disk; runs it cannot do fail with the
    /// reason (no `[spark]` needed).
    Native,
    /// The native engine for the runs it can do, Spark for the others (z-order, maintenance
    /// procedures, runs over `[native] max_run_mb` ...).
    Auto,
}

impl EngineChoice {
    pub fn as_str(self) -> &'static str {
        match self {
            EngineChoice::Spark => "spark",
            EngineChoice::Native => "native",
            EngineChoice::Auto => "auto",
        }
    }

    /// Whether runs of a table with this choice may go to Spark.
    pub fn uses_spark(self) -> bool {
        self != EngineChoice::Native
    }

    /// Whether runs of a table with this choice may go to the native engine.
    pub fn uses_native(self) -> bool {
        self != EngineChoice::Spark
    }
}

/// `[native]`: the JVM-free engine's bounds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NativeConfig {
    /// Native runs at once; more wait for a slot (the pool's `spark.max_concurrent` bounds all
    /// runs).
    #[serde(default = "default_native_runs")]
    pub max_concurrent_runs: NativeRuns,
    /// Worker threads of the engine's own runtime (reading and writing Parquet).
    #[serde(default = "default_native_threads")]
    pub threads: NativeRuns,
    /// A run reading more than this many MiB goes to Spark (`engine = "auto"`) or fails with
    /// the reason (`"native"`).
    #[serde(default = "default_max_run_mb")]
    pub max_run_mb: Mebibytes,
}

/// Runs or threads of the native engine.
pub type NativeRuns = Int<1, 256>;

pub(super) fn default_native_runs() -> NativeRuns {
    Int::new(2)
}

pub(super) fn default_native_threads() -> NativeRuns {
    Int::new(2)
}

pub(super) fn default_max_run_mb() -> Mebibytes {
    Int::new(2048)
}

impl Default for NativeConfig {
    fn default() -> Self {
        NativeConfig {
            max_concurrent_runs: default_native_runs(),
            threads: default_native_threads(),
            max_run_mb: default_max_run_mb(),
        }
    }
}
