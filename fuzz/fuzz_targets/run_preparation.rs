//! A run's preparation from what a claim carries that icepack does not choose: the partition spec
//! (parsed from the engine's `DESCRIBE TABLE` output) and the partition paths (from object keys).
//! The input is a `DESCRIBE` output, a blank line, then one partition path a line (`*` first: a
//! partition that went quiet). Preparing never fails for a configured catalog — a panic while
//! preparing is caught and reported as a failure, which is a crash here — and the job stays
//! within the limits: at most `MAX_REWRITE_CALLS` rewrites, each statement on one line.
#![no_main]

use std::sync::{Arc, OnceLock};

use icepack::config::{Config, TableSpec};
use icepack::engine::spark::sql::{MAX_REWRITE_CALLS, MAX_REWRITE_FILTER_BYTES};
use icepack::runs::settings::CompactionSettings;
use icepack::runs::strategy::RunStrategy;
use icepack::runs::task::{MidSizedFiles, Rewrite, Task, Trigger};
use icepack::table::accumulator::ClaimTicket;
use icepack::table::partitions::parse_describe;
use libfuzzer_sys::fuzz_target;

fn setup() -> &'static (CompactionSettings, TableSpec) {
    static SETUP: OnceLock<(CompactionSettings, TableSpec)> = OnceLock::new();
    SETUP.get_or_init(|| {
        let config = Config::from_toml_str(
            "[[tables]]\ntable = \"db.orders\"\nbucket = \"lake\"\nprefix = \"warehouse/orders/\"\n",
        )
        .unwrap();
        let spec = config.table_specs().remove(0);
        (CompactionSettings::from_config(Arc::new(config)), spec)
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (describe, paths) = text.split_once("\n\n").unwrap_or((text, ""));
    let mut partitions = Vec::new();
    let mut joining = Vec::new();
    for line in paths.lines() {
        match line.strip_prefix('*') {
            Some(path) => {
                joining.push(path.to_string());
                partitions.push(path.to_string());
            }
            None => partitions.push(line.to_string()),
        }
    }
    let (settings, spec) = setup();
    let ticket = ClaimTicket {
        run_id: "fuzz".to_string(),
        trigger: Trigger::Files,
        started_millis: 1_714_564_800_000,
        files: partitions.len() as u64 * 2,
        bytes: partitions.len() as u64 * 2,
        spec: parse_describe(describe),
        task: Task::Rewrite(Rewrite {
            partitions,
            min_input_files: 2,
            mid_sized: MidSizedFiles::only_in(joining),
            strategy: RunStrategy::Binpack,
            apply_deletes: false,
        }),
        nonce: "0f1e2d3c4b5a69788796a5b4c3d2e1f0".to_string(),
        upto_seq: 0,
        last_failure: None,
    };
    let job = match settings.prepare(spec, &ticket) {
        Ok(job) => job,
        Err(error) => panic!("a claim of a configured table was refused: {error}"),
    };
    let rewrites: Vec<&String> = job
        .statements
        .iter()
        .map(|statement| &statement.sql)
        .filter(|sql| sql.contains("rewrite_data_files"))
        .collect();
    assert!(!rewrites.is_empty() && rewrites.len() <= MAX_REWRITE_CALLS);
    for statement in &job.statements {
        assert!(!statement.sql.contains('\n'), "{statement:?}");
    }
    for rewrite in rewrites {
        // Quoting a filter at most doubles it; the rest of the call is short.
        assert!(
            rewrite.len() <= 2 * MAX_REWRITE_FILTER_BYTES + 4096,
            "{}",
            rewrite.len()
        );
    }
});
