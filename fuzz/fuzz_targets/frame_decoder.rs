//! Feeds arbitrary bytes through the gateway's read path: `split` frames
//! off the front of the buffer, `decode` each frame, and re-encode and
//! annotate whatever decodes. Any panic is a bug: the codec promises that
//! no input panics. Run: `cargo +nightly fuzz run frame_decoder`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pricewire::wire;

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    let mut out = vec![0u8; wire::SERVER_FRAME_LEN_MAX];
    loop {
        match wire::split_with_max(rest, wire::SERVER_FRAME_LEN_MAX) {
            Ok(Some(len)) => {
                let (frame, tail) = rest.split_at(len);
                if let Ok(msg) = wire::decode(frame) {
                    // Whatever decodes must re-encode and decode to the same message.
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
