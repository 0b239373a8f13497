//! Any SQS message body: parsing, routing and planning a batch must never panic, and whatever is
//! counted must be a routed, created, small data file of a configured table.
#![no_main]

use std::sync::OnceLock;

use icepack::config::{Config, TableSpec};
use icepack::intake::batch::{plan_batch, InboundMessage};
use icepack::intake::routing::Router;
use libfuzzer_sys::fuzz_target;

fn setup() -> &'static (Vec<TableSpec>, Router) {
    static SETUP: OnceLock<(Vec<TableSpec>, Router)> = OnceLock::new();
    SETUP.get_or_init(|| {
        let tables = Config::from_toml_str(
            "[[tables]]\ntable = \"db.orders\"\nbucket = \"lake\"\nprefix = \"warehouse/orders/\"\n",
        )
        .unwrap()
        .table_specs();
        let router = Router::new(&tables);
        (tables, router)
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(body) = std::str::from_utf8(data) else {
        return;
    };
    let (tables, router) = setup();
    let message = InboundMessage {
        id: "fuzz".to_string(),
        body: body.to_string(),
    };
    let plan = plan_batch(std::slice::from_ref(&message), router, tables);
    assert_eq!(plan.verdicts.len(), 1);
    for candidates in plan.candidates.values() {
        for candidate in candidates {
            assert_eq!(candidate.bucket, "lake");
            assert!(candidate.key.starts_with("warehouse/orders/"));
        }
    }
});
