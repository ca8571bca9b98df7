//! Feeds arbitrary bytes to the PROXY protocol v2 header parser, whole and
//! in the pieces a listener would read (never past what `Incomplete`
//! asks). Any panic, or a decision that depends on the split, is a bug.
//! Run from `fuzz/`:
//! `cargo +nightly fuzz run proxy_header corpus/proxy_header seeds/proxy_header`
#![no_main]

use libfuzzer_sys::fuzz_target;
use pricewire::runtime::proxy::{parse, Parse};

fuzz_target!(|data: &[u8]| {
    let whole = parse(data);
    // The first byte picks the read size, as a socket would hand them out.
    let step = usize::from(data.first().copied().unwrap_or(1)).max(1);
    let mut have = 0;
    let split = loop {
        match parse(&data[..have]) {
            Parse::Incomplete { need } if have < data.len() => {
                assert!(need > have, "need {need} at {have}");
                have = need.min(have + step).min(data.len());
            }
            other => break other,
        }
    };
    assert_eq!(split, whole);
    if let Parse::Header(h) = whole {
        assert!(h.len <= data.len());
    }
});
