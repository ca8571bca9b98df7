//! Feeds arbitrary bytes through the gateway's read path: `split` frames
//! off the front of the buffer, `decode` each frame, and re-encode and
//! annotate whatever decodes. Any panic is a bug: the codec promises that
//! no input panics. Run from `fuzz/`, seeded with the protocol document's
//! example frames (`seeds/frame_decoder`: version-1 frames, and the
//! frames whose layout a later version changed at that version, named
//! `*_v3.bin`; `PRICEWIRE_BLESS=1 cargo test --lib wire::tests::docs`
//! writes those):
//! `cargo +nightly fuzz run frame_decoder corpus/frame_decoder seeds/frame_decoder -- -dict=frame_decoder.dict`
#![no_main]

use libfuzzer_sys::fuzz_target;
use pricewire::wire;

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    loop {
        match wire::split_with_max(rest, wire::SERVER_FRAME_LEN_MAX) {
            Ok(Some(len)) => {
                let (frame, tail) = rest.split_at(len);
                if let Ok(msg) = wire::decode(frame) {
                    // Whatever decodes must re-encode and decode to the same
                    // message. The re-encoding is at this version: no longer
                    // than the frame, except by the fields an older version's
                    // block lacked (read as 0, written out now).
                    let mut out = vec![0u8; frame.len() + 256];
                    let n = msg.encode(&mut out).expect("a decoded message re-encodes");
                    let again = wire::decode(&out[..n]).expect("re-encoded frame decodes");
                    assert_eq!(again.to_owned_message(), msg.to_owned_message());
                    let _ = wire::annotate(frame);
                }
                rest = tail;
            }
            Ok(None) | Err(_) => break,
        }
    }
});
