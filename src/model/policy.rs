//! What a table is configured with for its decisions, as the configuration resolves it and
//! the policy (`table::policy`) uses it: its thresholds, and its pacing — the mode, the
//! configured spec and the pacing a decision uses once the table's run cost is known.

use serde::Serialize;

use crate::model::state::{PartitionCounts, TableState};

/// A table's thresholds, in bytes and milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    /// Files strictly smaller than this are small files.
    pub small_file_bytes: u64,
    pub min_files: u64,
    pub min_total_bytes: u64,
    /// `None` disables the time threshold.
    pub max_wait_millis: Option<i64>,
}

/// How a due table's run is paced (`pacing` in the configuration).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PacingMode {
    /// A run as soon as a threshold is crossed, of the partitions the rewrite rule finds worth
    /// it (`pacing = "off"` or `false`).
    Off,
    /// The user's thresholds are the contract (the default): a crossed files or bytes threshold
    /// runs once files stop landing (the settle window, at most `settle_max` after the oldest
    /// file of the burst), a partition reaching max-wait runs at once; every partition a run
    /// can improve joins it.
    #[default]
    Settle,
    /// Also weighs a run's cost against the files it fixes (`pacing = "cost"`, opt-in): it waits
    /// for enough files, or file-hours, to be worth the run's cost — the table's measured run
    /// cost unless `run_cost_seconds` is set — and for fragments to fill, but never past
    /// max-wait.
    Cost,
}

impl PacingMode {
    pub fn as_str(self) -> &'static str {
        match self {
            PacingMode::Off => "off",
            PacingMode::Settle => "settle",
            PacingMode::Cost => "cost",
        }
    }

    /// `"off"`, `"settle"` or `"cost"`; `false` is `"off"` and `true` the default, `"settle"`
    /// (before the modes, `true` meant the cost rules, which are opt-in now).
    pub fn parse(name: &str) -> Option<PacingMode> {
        match name {
            "off" | "false" => Some(PacingMode::Off),
            "settle" | "true" => Some(PacingMode::Settle),
            "cost" => Some(PacingMode::Cost),
            _ => None,
        }
    }
}

impl<'de> serde::Deserialize<'de> for PacingMode {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Flag(bool),
            Name(String),
        }
        let name = match Raw::deserialize(deserializer)? {
            Raw::Flag(flag) => flag.to_string(),
            Raw::Name(name) => name,
        };
        PacingMode::parse(&name).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "`{}` is not a pacing: expected \"settle\" (the default), \"cost\" or \"off\"",
                name.escape_debug()
            ))
        })
    }
}

/// A table's configured pacing, before its run cost is known: [`PacingSpec::resolve`] makes
/// the [`Pacing`] a decision uses, from the table's measured run cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacingSpec {
    pub mode: PacingMode,
    /// `run_cost_seconds` when configured: it wins over the measured cost.
    pub run_cost_millis: Option<u64>,
    /// What a run costs before any is measured: the engine's estimate.
    pub estimated_run_cost_millis: u64,
    pub file_fix_value_millis: u64,
    pub file_hour_cost_millis: u64,
    pub settle_millis: i64,
    pub settle_max_millis: i64,
    pub quiet_millis: i64,
    pub remerge_percent: u64,
    /// `fragment_fill_percent` when configured; else it follows the run cost.
    pub fragment_percent: Option<u64>,
}

/// Where a cost-paced table's run cost comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunCostSource {
    /// `run_cost_seconds`.
    Configured,
    /// The median duration of the table's recent successful runs.
    Measured,
    /// No run measured yet: the engine's estimate.
    Estimated,
}

impl PacingSpec {
    /// The pacing without pacing: a run as soon as a threshold is crossed.
    pub const OFF: PacingSpec = PacingSpec {
        mode: PacingMode::Off,
        run_cost_millis: None,
        estimated_run_cost_millis: 0,
        file_fix_value_millis: 0,
        file_hour_cost_millis: 0,
        settle_millis: 0,
        settle_max_millis: 0,
        quiet_millis: 0,
        remerge_percent: 0,
        fragment_percent: None,
    };

    /// The run cost the cost rules use, and where it comes from: `run_cost_seconds` when set,
    /// else `measured` (the table's recent runs), else the engine's estimate.
    pub fn run_cost(&self, measured_millis: Option<u64>) -> (u64, RunCostSource) {
        match (self.run_cost_millis, measured_millis) {
            (Some(configured), _) => (configured, RunCostSource::Configured),
            (None, Some(measured)) => (measured, RunCostSource::Measured),
            (None, None) => (self.estimated_run_cost_millis, RunCostSource::Estimated),
        }
    }

    /// The pacing of a table in this state: resolved with its measured run cost.
    pub fn for_state(&self, state: &TableState) -> Pacing {
        self.resolve(state.run_costs.median_millis())
    }

    /// The pacing a decision uses, given the table's measured run cost. The cost-worthiness
    /// rules (worth files, file-hours, fragments filling, re-merging outputs) only in the cost
    /// mode; the settle window and quiet partitions in both paced modes.
    pub fn resolve(&self, measured_run_cost_millis: Option<u64>) -> Pacing {
        let paced = Pacing {
            mode: self.mode,
            settle_millis: self.settle_millis,
            settle_max_millis: self.settle_max_millis,
            quiet_millis: self.quiet_millis,
            ..Pacing::OFF
        };
        match self.mode {
            PacingMode::Off => Pacing::OFF,
            PacingMode::Settle => paced,
            PacingMode::Cost => {
                let (run_cost_millis, _) = self.run_cost(measured_run_cost_millis);
                Pacing {
                    run_cost_millis,
                    file_fix_value_millis: self.file_fix_value_millis,
                    file_hour_cost_millis: self.file_hour_cost_millis,
                    remerge_percent: self.remerge_percent,
                    fragment_percent: self
                        .fragment_percent
                        .unwrap_or_else(|| Pacing::default_fragment_percent(run_cost_millis)),
                    ..paced
                }
            }
        }
    }
}

/// How a table paces its runs once a threshold is crossed (docs/design.md, "Pacing"), as a
/// decision uses it. In the default mode ([`PacingMode::Settle`]) a run waits only for files to
/// stop landing (the settle window), and a partition past max-wait not at all. In the cost mode a
/// run costs `run_cost_millis` of engine time whatever it rewrites; fixing a small file is worth
/// `file_fix_value_millis`, and a small file left waiting costs `file_hour_cost_millis` an hour
/// (slower scans, more requests): a run starts when it fixes enough files to be worth its cost
/// and they have waited long enough, together — which makes a table that fills fast wait for
/// more files per run, and one that fills slowly run at its thresholds — and never later than
/// max-wait. A partition quiet for `quiet_millis` is complete: its small files may merge into its
/// mid-sized outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pacing {
    pub mode: PacingMode,
    pub run_cost_millis: u64,
    /// 0 turns the cost rule off: a run starts as soon as a threshold is crossed.
    pub file_hour_cost_millis: u64,
    /// What fixing one small file is worth: a run waits for `run_cost / this` files it can fix
    /// (0: off).
    pub file_fix_value_millis: u64,
    /// A due table waits until no file has landed for this long (0: off) ...
    pub settle_millis: i64,
    /// ... but not past this long after its oldest pending file of the burst landed.
    pub settle_max_millis: i64,
    /// A partition with no new file for this long is complete: its small files merge into its
    /// mid-sized outputs (0: never).
    pub quiet_millis: i64,
    /// A partition holding one still-small output of an earlier run (a file known from the
    /// metadata) joins a run only once its new files hold at least this share of the output's
    /// bytes, in percent (0: at once), or it is quiet or past max-wait: an output is not read
    /// and written again for every few files landing beside it.
    pub remerge_percent: u64,
    /// A partition's small files count toward a run only once they hold this share of a small
    /// file's size, in percent (0: off), or it is quiet or past max-wait: what they merge into
    /// is then no longer small, and is not read again when more files land.
    pub fragment_percent: u64,
}

/// What a warm engine's run costs at most (a Spark Connect server: ~1 s), for the default of
/// [`Pacing::fragment_percent`].
pub const WARM_RUN_COST_MILLIS: u64 = 10_000;

impl Pacing {
    /// `fragment_percent` when it is not configured: on (100) where a run's fixed cost is at most
    /// `WARM_RUN_COST_MILLIS` — a warm engine, where what a run costs is the bytes it reads, and
    /// still-small outputs read again are most of them — and off for an engine that starts per
    /// run, where the count and time rules already batch.
    pub fn default_fragment_percent(run_cost_millis: u64) -> u64 {
        if run_cost_millis <= WARM_RUN_COST_MILLIS {
            100
        } else {
            0
        }
    }

    /// No pacing: a run as soon as a threshold is crossed.
    pub const OFF: Pacing = Pacing {
        mode: PacingMode::Off,
        run_cost_millis: 0,
        file_hour_cost_millis: 0,
        file_fix_value_millis: 0,
        settle_millis: 0,
        settle_max_millis: 0,
        quiet_millis: 0,
        remerge_percent: 0,
        fragment_percent: 0,
    };

    /// Whether runs are weighed against what they fix.
    pub fn weighs_cost(&self) -> bool {
        self.mode == PacingMode::Cost
            && (self.file_hour_cost_millis > 0 || self.file_fix_value_millis > 0)
    }

    /// The files a run must fix to be worth its cost (1 when the count rule is off).
    pub fn worth_files(&self) -> u64 {
        if self.file_fix_value_millis == 0 {
            return 1;
        }
        self.run_cost_millis
            .div_ceil(self.file_fix_value_millis)
            .max(1)
    }

    /// The file-seconds of waiting that make a run worth its cost.
    pub fn worth_file_seconds(&self) -> f64 {
        if self.file_hour_cost_millis == 0 {
            return 0.0;
        }
        self.run_cost_millis as f64 / self.file_hour_cost_millis as f64 * 3600.0
    }
}

/// Why a table is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DueReason {
    Files,
    Bytes,
    /// One partition alone has `min_input_files` small files.
    Partition,
    MaxWait,
}

impl DueReason {
    pub fn as_str(self) -> &'static str {
        match self {
            DueReason::Files => "files",
            DueReason::Bytes => "bytes",
            DueReason::Partition => "partition",
            DueReason::MaxWait => "max_wait",
        }
    }
}

impl From<DueReason> for crate::model::task::Trigger {
    fn from(reason: DueReason) -> Self {
        use crate::model::task::Trigger;
        match reason {
            DueReason::Files => Trigger::Files,
            DueReason::Bytes => Trigger::Bytes,
            DueReason::Partition => Trigger::Partition,
            DueReason::MaxWait => Trigger::MaxWait,
        }
    }
}

/// How `rewrite_data_files` decides whether a partition's file group is rewritten: enough files,
/// or at least two files holding a target file's worth of data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RewriteRule {
    pub min_input_files: u64,
    pub target_file_bytes: u64,
}

impl RewriteRule {
    /// `min-input-files` for a run with this trigger: a max-wait run rewrites any partition with
    /// two small files or more (one file cannot be improved by rewriting it alone).
    pub fn min_input_files_for(&self, reason: DueReason) -> u64 {
        match reason {
            DueReason::MaxWait => 2.min(self.min_input_files),
            _ => self.min_input_files,
        }
    }

    pub fn worth_rewriting(&self, partition: &PartitionCounts, min_input_files: u64) -> bool {
        partition.files >= min_input_files.max(1)
            || (partition.files >= 2 && partition.bytes >= self.target_file_bytes)
    }
}
