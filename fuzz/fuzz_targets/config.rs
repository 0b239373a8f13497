//! Any configuration text: loading either fails with an error or yields a configuration that
//! validates and whose table specs can be built and routed. Never a panic.
#![no_main]

use icepack::config::Config;
use icepack::intake::routing::Router;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(config) = Config::from_toml_str(text) {
        config.validate().expect("a loaded configuration is valid");
        let tables = config.table_specs();
        let _ = Router::new(&tables);
    }
});
