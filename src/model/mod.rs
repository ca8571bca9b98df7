//! Domain types: fixed-point prices, inbound ticks, aggregated prices, and
//! the instrument, tier and provider tables, and provider health.

pub mod aggregated;
pub mod health;
pub mod instruments;
pub mod markups;
pub mod price;
pub mod tick;

pub use aggregated::{fresh_stream_id, price_flags, Price, TierId};
pub use health::ProviderHealth;
pub use instruments::{Instrument, InstrumentTable, ProviderDef, ProviderKind, Tier};
pub use markups::{Markups, TOP_OF_BOOK};
pub use price::{FixedPrice, Mantissa, NO_PRICE, PRICE_MAX};
pub use tick::{tick_flags, ProviderId, SymbolId, Tick};
