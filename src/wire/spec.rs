//! The schema as data: every message's template id, root block, groups and
//! var data, built from the same [`Block`] types the codec uses. It drives
//! the annotated hex dumps ([`annotate()`](super::annotate())), the layout
//! tables in `docs/protocol.md` and the check of `schema/pricewire-sbe.xml`,
//! so none of them can drift from the code.

use super::blocks::*;
use super::codes::template;
use super::field::{Block, FieldInfo};
use crate::model::SymbolId;

/// Who sends a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sender {
    /// A subscriber terminal.
    Client,
    /// The price server.
    Server,
    /// A price provider on the ingest port.
    Provider,
    /// Either side.
    Both,
}

/// A fixed block's length and fields.
#[derive(Debug, Clone, Copy)]
pub struct BlockSpec {
    /// Length of the block in bytes.
    pub block_length: u16,
    /// The block's fields, in wire order.
    pub fields: &'static [FieldInfo],
}

impl BlockSpec {
    /// The length of the block's first-version fields (those without a
    /// `since_version`): the shortest block a decoder accepts.
    pub fn block_length_min(&self) -> u16 {
        self.fields
            .iter()
            .filter(|f| f.since_version == 0)
            .map(|f| f.size as u16)
            .sum()
    }
}

const fn block<B: Block>() -> BlockSpec {
    BlockSpec {
        block_length: B::BLOCK_LENGTH,
        fields: B::FIELDS,
    }
}

/// A repeating group: its schema name and entry block.
#[derive(Debug, Clone, Copy)]
pub struct GroupSpec {
    /// The group's name in the schema.
    pub name: &'static str,
    /// Layout of one entry.
    pub entry: BlockSpec,
}

/// One message of the schema.
#[derive(Debug, Clone, Copy)]
pub struct MessageSpec {
    /// The message's name in the schema.
    pub name: &'static str,
    /// Its template id ([`template`]).
    pub template_id: u16,
    /// Who sends it.
    pub sent_by: Sender,
    /// Layout of the root block.
    pub root: BlockSpec,
    /// Repeating groups, in wire order.
    pub groups: &'static [GroupSpec],
    /// Var data fields (u8 length + bytes), in order.
    pub data: &'static [&'static str],
}

const fn msg(
    name: &'static str,
    template_id: u16,
    sent_by: Sender,
    root: BlockSpec,
) -> MessageSpec {
    MessageSpec {
        name,
        template_id,
        sent_by,
        root,
        groups: &[],
        data: &[],
    }
}

const fn group<T: Block>(name: &'static str) -> GroupSpec {
    GroupSpec {
        name,
        entry: block::<T>(),
    }
}

use Sender::*;

/// Every message, in template id order.
pub const MESSAGES: &[MessageSpec] = &[
    MessageSpec {
        data: &["account", "token"],
        ..msg("Logon", template::LOGON, Client, block::<LogonRoot>())
    },
    msg(
        "LogonAccepted",
        template::LOGON_ACCEPTED,
        Server,
        block::<LogonAccepted>(),
    ),
    msg(
        "LogonRejected",
        template::LOGON_REJECTED,
        Server,
        block::<LogonRejected>(),
    ),
    msg("Heartbeat", template::HEARTBEAT, Both, block::<EmptyRoot>()),
    msg("Logout", template::LOGOUT, Client, block::<EmptyRoot>()),
    MessageSpec {
        data: &["text"],
        ..msg(
            "Disconnect",
            template::DISCONNECT,
            Server,
            block::<DisconnectRoot>(),
        )
    },
    msg(
        "SymbolListRequest",
        template::SYMBOL_LIST_REQUEST,
        Client,
        block::<SymbolListRequest>(),
    ),
    MessageSpec {
        groups: &[group::<SymbolInfo>("symbols"), group::<TierInfo>("tiers")],
        ..msg(
            "SymbolDirectory",
            template::SYMBOL_DIRECTORY,
            Server,
            block::<RequestIdRoot>(),
        )
    },
    MessageSpec {
        groups: &[group::<SymbolRef>("entries")],
        ..msg(
            "Subscribe",
            template::SUBSCRIBE,
            Client,
            block::<SubscribeRoot>(),
        )
    },
    MessageSpec {
        groups: &[group::<SymbolRef>("entries")],
        ..msg(
            "Unsubscribe",
            template::UNSUBSCRIBE,
            Client,
            block::<SubscribeRoot>(),
        )
    },
    MessageSpec {
        groups: &[group::<SubscribeResult>("results")],
        ..msg(
            "SubscribeResponse",
            template::SUBSCRIBE_RESPONSE,
            Server,
            block::<RequestIdRoot>(),
        )
    },
    msg(
        "PriceSnapshot",
        template::PRICE_SNAPSHOT,
        Server,
        block::<PriceSnapshot>(),
    ),
    msg(
        "PriceUpdate",
        template::PRICE_UPDATE,
        Server,
        block::<PriceBody>(),
    ),
    MessageSpec {
        groups: &[group::<SymbolId>("symbols")],
        ..msg(
            "SnapshotRequest",
            template::SNAPSHOT_REQUEST,
            Client,
            block::<SnapshotRequestRoot>(),
        )
    },
    MessageSpec {
        groups: &[group::<PriceBody>("prices")],
        ..msg(
            "SnapshotResponse",
            template::SNAPSHOT_RESPONSE,
            Server,
            block::<RequestIdRoot>(),
        )
    },
    msg(
        "HistoryRequest",
        template::HISTORY_REQUEST,
        Client,
        block::<HistoryRequest>(),
    ),
    MessageSpec {
        groups: &[group::<HistoryTick>("ticks")],
        ..msg(
            "HistoryResponse",
            template::HISTORY_RESPONSE,
            Server,
            block::<HistoryResponseRoot>(),
        )
    },
    MessageSpec {
        data: &["text"],
        ..msg("Reject", template::REJECT, Server, block::<RejectRoot>())
    },
    MessageSpec {
        data: &["token"],
        ..msg(
            "ProviderLogon",
            template::PROVIDER_LOGON,
            Provider,
            block::<ProviderLogonRoot>(),
        )
    },
    MessageSpec {
        groups: &[group::<QuoteEntry>("quotes")],
        ..msg(
            "ProviderQuote",
            template::PROVIDER_QUOTE,
            Provider,
            block::<EmptyRoot>(),
        )
    },
];

impl super::Message<'_> {
    /// Who may send this message; a gateway refuses a message from the
    /// wrong side with `Reject(unexpected_message)`.
    pub fn sent_by(&self) -> Sender {
        message_spec(self.template_id()).map_or(Sender::Both, |s| s.sent_by)
    }
}

/// The message with this template id.
pub fn message_spec(template_id: u16) -> Option<&'static MessageSpec> {
    MESSAGES.iter().find(|m| m.template_id == template_id)
}

/// `heartbeat_interval_ms` → `heartbeatIntervalMs`, the schema's spelling.
pub fn camel_case(snake: &str) -> String {
    let mut out = String::with_capacity(snake.len());
    let mut upper = false;
    for c in snake.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}
