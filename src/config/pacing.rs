//! `pacing_profile`: the pacing keys a table leaves unset, chosen by name instead of tuned one by
//! one. The cost model has seven parameters only an expert would set; a profile says what the
//! table favours, and the run cost comes from the table's own measured runs.

use serde::{Deserialize, Serialize};

use super::{DaySeconds, Int, Percent, WaitMinutes};

/// A named set of the pacing keys (`pacing_profile`). A key set anywhere — the table, its tenant,
/// `[defaults]` — wins over the profile's value; the profile itself is chosen the same way
/// (table, tenant, `[defaults]`, else `balanced`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PacingProfile {
    /// Queries first: short settle windows, a partition complete after 5 quiet minutes, a small
    /// file's wait costed high and its fix valued high, so cost pacing runs soon; fragments do
    /// not wait to fill. More runs.
    Fresh,
    /// The built-in values (the default).
    #[default]
    Balanced,
    /// Engine time first: longer settle windows, a partition complete after 30 quiet minutes,
    /// small files valued low, still-small outputs merged again only with half their size of new
    /// data, fragments waiting to fill a small file. Fewer, larger runs; max-wait still bounds
    /// every wait.
    Thrifty,
}

/// The values a profile gives the pacing keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacingValues {
    pub settle_seconds: DaySeconds,
    pub settle_max_seconds: DaySeconds,
    pub quiet_partition_minutes: WaitMinutes,
    pub file_fix_value_seconds: DaySeconds,
    pub file_hour_cost_seconds: DaySeconds,
    pub remerge_new_data_percent: Percent,
    /// `None`: by the run cost (100 when at most 10 s, else 0).
    pub fragment_fill_percent: Option<Percent>,
}

impl PacingProfile {
    pub const ALL: [PacingProfile; 3] = [
        PacingProfile::Fresh,
        PacingProfile::Balanced,
        PacingProfile::Thrifty,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            PacingProfile::Fresh => "fresh",
            PacingProfile::Balanced => "balanced",
            PacingProfile::Thrifty => "thrifty",
        }
    }

    pub fn parse(name: &str) -> Option<PacingProfile> {
        PacingProfile::ALL
            .into_iter()
            .find(|profile| profile.as_str() == name)
    }

    pub const fn values(self) -> PacingValues {
        match self {
            PacingProfile::Fresh => PacingValues {
                settle_seconds: Int::new(15),
                settle_max_seconds: Int::new(60),
                quiet_partition_minutes: Int::new(5),
                file_fix_value_seconds: Int::new(30),
                file_hour_cost_seconds: Int::new(200),
                remerge_new_data_percent: Int::new(0),
                fragment_fill_percent: Some(Int::new(0)),
            },
            PacingProfile::Balanced => PacingValues {
                settle_seconds: Int::new(60),
                settle_max_seconds: Int::new(300),
                quiet_partition_minutes: Int::new(15),
                file_fix_value_seconds: Int::new(8),
                file_hour_cost_seconds: Int::new(40),
                remerge_new_data_percent: Int::new(0),
                fragment_fill_percent: None,
            },
            PacingProfile::Thrifty => PacingValues {
                settle_seconds: Int::new(120),
                settle_max_seconds: Int::new(900),
                quiet_partition_minutes: Int::new(30),
                file_fix_value_seconds: Int::new(2),
                file_hour_cost_seconds: Int::new(10),
                remerge_new_data_percent: Int::new(50),
                fragment_fill_percent: Some(Int::new(100)),
            },
        }
    }
}
