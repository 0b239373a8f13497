//! S3 event keys: decoding never panics, and never makes a key longer (`+` becomes one space,
//! `%XY` one byte).
#![no_main]

use icepack::intake::event::key::decode_event_key;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(encoded) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(key) = decode_event_key(encoded) {
        assert!(key.len() <= encoded.len(), "{encoded:?} → {key:?}");
    }
});
