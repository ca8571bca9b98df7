//! What can still be read from a frame that did not decode: the template
//! the header names and, for requests, the `requestId` at the start of the
//! root block. A Reject echoes both (docs/protocol.md §6, "Echo").

use super::codes::template;
use super::frame::{HEADER_LEN, SOFH_LEN};
use super::{SCHEMA_ID, VERSION_MIN};

/// The ids a Reject of an undecodable frame can echo.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Readable {
    /// The header's templateId (0 if the header is incomplete).
    pub template_id: u16,
    /// The request's requestId, when the frame is of this schema and a
    /// supported version, its template is a client request, and both the
    /// header's blockLength and the bytes present cover the field.
    pub request_id: Option<u64>,
}

/// Templates whose root block starts with `requestId` (uint64).
fn has_request_id(t: u16) -> bool {
    use template as t_;
    matches!(
        t,
        t_::SYMBOL_LIST_REQUEST
            | t_::SYMBOL_DIRECTORY
            | t_::SUBSCRIBE
            | t_::UNSUBSCRIBE
            | t_::SUBSCRIBE_RESPONSE
            | t_::SNAPSHOT_REQUEST
            | t_::SNAPSHOT_RESPONSE
            | t_::HISTORY_REQUEST
            | t_::HISTORY_RESPONSE
            | t_::REJECT
    )
}

/// Reads what it can of `frame` (a whole frame, SOFH included); never
/// fails and never reads past the frame.
pub fn readable(frame: &[u8]) -> Readable {
    let u16_at = |off: usize| {
        frame
            .get(off..off + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    let (Some(block_length), Some(template_id), Some(schema_id), Some(version)) = (
        u16_at(SOFH_LEN),
        u16_at(SOFH_LEN + 2),
        u16_at(SOFH_LEN + 4),
        u16_at(SOFH_LEN + 6),
    ) else {
        return Readable::default();
    };
    let ours = schema_id == SCHEMA_ID && version >= VERSION_MIN;
    let request_id = (ours && has_request_id(template_id) && block_length >= 8)
        .then(|| frame.get(HEADER_LEN..HEADER_LEN + 8))
        .flatten()
        .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
    Readable {
        template_id,
        request_id,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{encode_symbol_list_request, SymbolListRequest};

    fn symbol_list(request_id: u64) -> Vec<u8> {
        let mut b = vec![0u8; 64];
        let m = SymbolListRequest {
            request_id,
            budget_us: 0,
            critical: false,
        };
        let n = encode_symbol_list_request(&mut b, &m).expect("fits");
        b.truncate(n);
        b
    }

    #[test]
    fn a_request_gives_its_template_and_request_id() {
        let f = symbol_list(11);
        let r = readable(&f);
        assert_eq!(r.template_id, template::SYMBOL_LIST_REQUEST);
        assert_eq!(r.request_id, Some(11));
    }

    #[test]
    fn a_short_block_or_missing_bytes_give_no_request_id() {
        let mut f = symbol_list(11);
        f[SOFH_LEN] = 5; // blockLength 5 does not cover requestId
        assert_eq!(readable(&f).request_id, None);
        assert_eq!(readable(&f).template_id, template::SYMBOL_LIST_REQUEST);
        let f = symbol_list(11);
        assert_eq!(readable(&f[..HEADER_LEN + 7]).request_id, None);
        assert_eq!(readable(&f[..HEADER_LEN - 1]), Readable::default());
    }

    #[test]
    fn another_schema_names_only_the_template() {
        let mut f = symbol_list(11);
        f[SOFH_LEN + 4] = 0x34; // schemaId 0x5034
        assert_eq!(readable(&f).template_id, template::SYMBOL_LIST_REQUEST);
        assert_eq!(readable(&f).request_id, None);
        let mut f = symbol_list(11);
        f[SOFH_LEN + 6] = 0; // version 0
        f[SOFH_LEN + 7] = 0;
        assert_eq!(readable(&f).template_id, template::SYMBOL_LIST_REQUEST);
        assert_eq!(readable(&f).request_id, None);
    }
}
