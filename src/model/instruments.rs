//! Instrument, tier and provider tables.
//!
//! Symbol, tier and provider ids are dense indices into these tables, fixed
//! at start-up; the hot path indexes arrays by them and never looks up names.

use std::collections::HashMap;

use super::aggregated::TierId;
use super::price::{Mantissa, DIGITS_MAX};
use super::tick::{ProviderId, SymbolId};

/// Longest instrument name accepted (it travels as a fixed 16-byte field).
pub const SYMBOL_NAME_LEN_MAX: usize = 16;
/// Most instruments one table can hold.
pub const INSTRUMENTS_MAX: usize = 4096;
/// Most tiers (the tier id is a byte; the price table is symbols x tiers).
pub const TIERS_MAX: usize = 16;
/// Most providers per engine (per-symbol quote arrays are this wide at most).
pub const PROVIDERS_MAX: usize = 32;

/// One tradable instrument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instrument {
    /// Dense index, reassigned by [`InstrumentTable::new`] from table order.
    pub id: SymbolId,
    /// Name, unique in the table, at most [`SYMBOL_NAME_LEN_MAX`] bytes (e.g. `EURUSD`).
    pub name: String,
    /// Decimal exponent: a point is `10^-digits`.
    pub digits: u8,
    /// Where the synthetic feed starts its random walk, in points.
    pub base_price: Mantissa,
    /// Typical provider spread in points (synthetic feed).
    pub spread_points: Mantissa,
}

/// A price tier: a markup (spread widening) applied per side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tier {
    /// Dense index, reassigned by [`InstrumentTable::new`]; what subscribers log on with.
    pub id: TierId,
    /// Name from the config, e.g. `vip`.
    pub name: String,
    /// Points subtracted from the bid and added to the ask.
    pub markup_points: Mantissa,
    /// Per-symbol markups that replace `markup_points`, by symbol id.
    pub overrides: Vec<(SymbolId, Mantissa)>,
}

impl Tier {
    /// Markup for one symbol, in points per side.
    pub fn markup_for(&self, symbol: SymbolId) -> Mantissa {
        self.overrides
            .iter()
            .find(|(s, _)| *s == symbol)
            .map_or(self.markup_points, |&(_, m)| m)
    }
}

/// How a provider's quotes reach pricewire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProviderKind {
    /// The built-in random-walk generator.
    Synthetic,
    /// A bridge pushing quotes into the provider ingest listener.
    Ingest,
    /// A FIX 4.4 market-data session pricewire initiates.
    Fix,
}

/// One liquidity provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderDef {
    /// Dense index, reassigned by [`InstrumentTable::new`]; at most [`PROVIDERS_MAX`] providers.
    pub id: ProviderId,
    /// Name from the config; what bridges and operators refer to it by.
    pub name: String,
    /// How its quotes arrive, and so which feed serves it.
    pub kind: ProviderKind,
    /// Synthetic feed: constant offset of this provider's mid, in points.
    pub skew_points: Mantissa,
    /// Ingest: the token a bridge must present at ProviderLogon.
    pub token: String,
}

/// The instrument, tier and provider tables, immutable after start-up.
#[derive(Debug, Clone)]
pub struct InstrumentTable {
    instruments: Vec<Instrument>,
    by_name: HashMap<String, SymbolId>,
    tiers: Vec<Tier>,
    providers: Vec<ProviderDef>,
}

impl InstrumentTable {
    /// Builds the table; ids are reassigned densely in the given order.
    /// Panics on duplicate names or out-of-range sizes: callers validate
    /// user input first (see `config`), so a failure here is a bug.
    pub fn new(
        mut instruments: Vec<Instrument>,
        mut tiers: Vec<Tier>,
        mut providers: Vec<ProviderDef>,
    ) -> Self {
        assert!(!instruments.is_empty() && instruments.len() <= INSTRUMENTS_MAX);
        assert!(!tiers.is_empty() && tiers.len() <= TIERS_MAX);
        assert!(!providers.is_empty() && providers.len() <= PROVIDERS_MAX);
        let mut by_name = HashMap::with_capacity(instruments.len());
        for (i, inst) in instruments.iter_mut().enumerate() {
            inst.id = i as SymbolId;
            assert!(inst.digits <= DIGITS_MAX);
            let prev = by_name.insert(inst.name.clone(), inst.id);
            assert!(prev.is_none(), "duplicate instrument {}", inst.name);
        }
        for (i, t) in tiers.iter_mut().enumerate() {
            t.id = i as TierId;
        }
        for (i, p) in providers.iter_mut().enumerate() {
            p.id = i as ProviderId;
        }
        InstrumentTable {
            instruments,
            by_name,
            tiers,
            providers,
        }
    }

    /// The built-in instruments, tiers and `providers` synthetic providers.
    pub fn default_with_providers(providers: usize) -> Self {
        InstrumentTable::new(
            default_instruments(),
            default_tiers(),
            synthetic_providers(providers),
        )
    }

    /// Every instrument, indexed by symbol id.
    pub fn instruments(&self) -> &[Instrument] {
        &self.instruments
    }
    /// Every tier, indexed by tier id; never empty.
    pub fn tiers(&self) -> &[Tier] {
        &self.tiers
    }
    /// Every provider, indexed by provider id; never empty.
    pub fn providers(&self) -> &[ProviderDef] {
        &self.providers
    }
    /// Number of instruments (not tiers or providers).
    pub fn len(&self) -> usize {
        self.instruments.len()
    }
    /// Always `false` for a table built by [`InstrumentTable::new`], which
    /// refuses an empty instrument list.
    pub fn is_empty(&self) -> bool {
        self.instruments.is_empty()
    }
    /// The instrument with symbol id `id`, if in range.
    pub fn get(&self, id: SymbolId) -> Option<&Instrument> {
        self.instruments.get(id as usize)
    }
    /// The instrument named exactly `name` (case-sensitive), by hash lookup.
    pub fn by_name(&self, name: &str) -> Option<&Instrument> {
        self.by_name
            .get(name)
            .map(|&id| &self.instruments[id as usize])
    }
    /// The tier named exactly `name`; a linear scan of at most [`TIERS_MAX`].
    pub fn tier_by_name(&self, name: &str) -> Option<&Tier> {
        self.tiers.iter().find(|t| t.name == name)
    }
    /// The provider named exactly `name`; a linear scan of at most [`PROVIDERS_MAX`].
    pub fn provider_by_name(&self, name: &str) -> Option<&ProviderDef> {
        self.providers.iter().find(|p| p.name == name)
    }
    /// Digits of a symbol; 0 for an unknown id.
    pub fn digits(&self, id: SymbolId) -> u8 {
        self.get(id).map_or(0, |i| i.digits)
    }
}

/// (name, digits, base price in points, typical spread in points).
const DEFAULT_INSTRUMENTS: &[(&str, u8, Mantissa, Mantissa)] = &[
    ("EURUSD", 5, 108_120, 8),
    ("GBPUSD", 5, 126_540, 12),
    ("USDJPY", 3, 149_870, 10),
    ("USDCHF", 5, 88_210, 12),
    ("AUDUSD", 5, 65_430, 10),
    ("USDCAD", 5, 136_250, 14),
    ("NZDUSD", 5, 59_870, 15),
    ("EURGBP", 5, 85_440, 12),
    ("EURJPY", 3, 162_040, 18),
    ("GBPJPY", 3, 189_650, 25),
    ("EURCHF", 5, 95_370, 15),
    ("AUDJPY", 3, 98_060, 18),
    ("USDSGD", 5, 134_520, 30),
    ("USDMXN", 5, 1_712_340, 250),
    ("XAUUSD", 2, 265_012, 25),
    ("XAGUSD", 3, 31_245, 30),
    ("XPTUSD", 2, 98_550, 300),
    ("US500", 1, 53_217, 5),
    ("US30", 1, 389_250, 20),
    ("NAS100", 1, 186_420, 15),
    ("GER40", 1, 191_330, 12),
    ("UK100", 1, 81_245, 10),
    ("JPN225", 0, 38_950, 8),
    ("USOIL", 2, 7_125, 3),
    ("BTCUSD", 2, 6_512_345, 3_000),
];

/// The built-in instrument set: FX majors and crosses, metals, index and
/// commodity CFDs with their customary digits.
pub fn default_instruments() -> Vec<Instrument> {
    DEFAULT_INSTRUMENTS
        .iter()
        .enumerate()
        .map(
            |(i, &(name, digits, base_price, spread_points))| Instrument {
                id: i as SymbolId,
                name: name.to_string(),
                digits,
                base_price,
                spread_points,
            },
        )
        .collect()
}

/// The built-in tiers: `raw` (no markup), `standard` and `retail`.
pub fn default_tiers() -> Vec<Tier> {
    [("raw", 0), ("standard", 5), ("retail", 12)]
        .iter()
        .enumerate()
        .map(|(i, &(name, markup_points))| Tier {
            id: i as TierId,
            name: name.to_string(),
            markup_points,
            overrides: Vec::new(),
        })
        .collect()
}

/// `count` synthetic providers named `lp1`, `lp2`, ... with small skews.
pub fn synthetic_providers(count: usize) -> Vec<ProviderDef> {
    (0..count)
        .map(|i| ProviderDef {
            id: i as ProviderId,
            name: format!("lp{}", i + 1),
            kind: ProviderKind::Synthetic,
            skew_points: (i as Mantissa % 3) - 1,
            token: String::new(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_set_has_customary_digits() {
        let t = InstrumentTable::default_with_providers(3);
        assert!(t.len() >= 20);
        let digits = |n: &str| t.by_name(n).unwrap().digits;
        assert_eq!(digits("EURUSD"), 5);
        assert_eq!(digits("USDJPY"), 3);
        assert_eq!(digits("XAUUSD"), 2);
        assert_eq!(digits("US500"), 1);
        assert_eq!(digits("JPN225"), 0);
        for (i, inst) in t.instruments().iter().enumerate() {
            assert_eq!(inst.id as usize, i);
            assert!(inst.name.len() <= SYMBOL_NAME_LEN_MAX);
        }
    }

    #[test]
    fn tier_override_replaces_default_markup() {
        let tier = Tier {
            id: 0,
            name: "x".into(),
            markup_points: 5,
            overrides: vec![(3, 40)],
        };
        assert_eq!(tier.markup_for(3), 40);
        assert_eq!(tier.markup_for(4), 5);
    }
}
