//! Fuzzes the config parser and validator (`edgecache -t`): TOML, serde into the config
//! types, and every semantic check. Inputs are mutated from a real config (the seed
//! below is mixed into short inputs so that the fuzzer starts deep in valid configs).
//! Invariants: nothing panics; an error names a line inside the text (1..=lines+1) and
//! a non-empty key or message, formatted `file:line: key: message`.
#![no_main]

use libfuzzer_sys::fuzz_target;

const SEED: &str = include_str!("../../crates/edge-core/src/config/default.toml");

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // A host name in an address would be resolved (DNS): keep the fuzzer off the
    // network by skipping quoted `name:port` strings whose host has letters.
    let resolvable = text.split('"').skip(1).step_by(2).any(|q| {
        q.rsplit_once(':')
            .is_some_and(|(host, _)| !host.starts_with('[') && host.bytes().any(|b| b.is_ascii_alphabetic()))
    });
    if resolvable {
        return;
    }
    let owned;
    let text = if text.len() < 8 {
        owned = format!("{SEED}{text}");
        owned.as_str()
    } else {
        text
    };
    match edge_core::config::parse("fuzz.toml", text) {
        Ok(_) => {}
        Err(e) => {
            let lines = text.lines().count().max(1);
            assert!(e.line >= 1 && e.line <= lines + 1, "line {} of {lines}", e.line);
            assert!(!e.key.is_empty() || !e.message.is_empty());
            let shown = e.to_string();
            assert!(shown.starts_with("fuzz.toml:"), "{shown}");
        }
    }
});
