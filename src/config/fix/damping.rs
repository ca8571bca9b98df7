//! Settings of the FIX provider's flap damping and gray rule (keys of
//! `[providers.fix]`, see docs/fix.md "Flap damping" and "Gray
//! providers"). Resolution happens once at start-up.

use super::error::key;
use super::{FixConfigError, FixProviderFile};

/// Penalty one early session end adds (the unit of every threshold).
pub const FLAP_PENALTY: u32 = 1_000;
/// A logged-on session that ends sooner than this is a flap, in ms.
pub const FLAP_STABLE_MS_DEFAULT: u64 = 60_000;
/// Half-life of the flap penalty, in ms.
pub const FLAP_HALF_LIFE_MS_DEFAULT: u64 = 60_000;
/// Penalty at which the provider is damped (two early ends within a
/// half-life).
pub const FLAP_SUPPRESS_DEFAULT: u32 = 1_500;
/// Penalty below which a damped provider is no longer damped.
pub const FLAP_REUSE_DEFAULT: u32 = 750;
/// Longest a provider stays damped after its last flap, in ms (sets the
/// penalty's ceiling: reuse x 2^(max_suppress / half_life)).
pub const FLAP_MAX_SUPPRESS_MS_DEFAULT: u64 = 300_000;
/// Quote lapses (the last quote aging past the engine's max quote age
/// while logged on) within `gray_window_ms` that make the provider gray.
pub const GRAY_LAPSES_DEFAULT: u32 = 3;
/// Window of the lapse count, in ms.
pub const GRAY_WINDOW_MS_DEFAULT: u64 = 30_000;
/// A gray provider whose quotes stay fresh this long is no longer gray,
/// in ms.
pub const GRAY_CLEAR_MS_DEFAULT: u64 = 10_000;
/// Largest lapse count a window may be set to hold.
pub const GRAY_LAPSES_MAX: u32 = 1_000;
/// Largest suppress / reuse threshold accepted.
pub const FLAP_THRESHOLD_MAX: u32 = 1_000_000;

/// Route-flap damping of one provider (BGP style, RFC 2439): each
/// logged-on session that ends within `stable_ms` adds [`FLAP_PENALTY`];
/// the penalty halves every `half_life_ms`; at `suppress` the provider is
/// damped (out of the price whatever its session does) until the penalty
/// decays below `reuse`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlapDamping {
    /// Sessions shorter than this are flaps, in ms; 0 turns damping off.
    pub stable_ms: u64,
    /// Half-life of the penalty, in ms.
    pub half_life_ms: u64,
    /// Penalty that damps the provider.
    pub suppress: u32,
    /// Penalty below which damping ends.
    pub reuse: u32,
    /// Longest damping after the last flap, in ms.
    pub max_suppress_ms: u64,
}

impl Default for FlapDamping {
    fn default() -> Self {
        FlapDamping {
            stable_ms: FLAP_STABLE_MS_DEFAULT,
            half_life_ms: FLAP_HALF_LIFE_MS_DEFAULT,
            suppress: FLAP_SUPPRESS_DEFAULT,
            reuse: FLAP_REUSE_DEFAULT,
            max_suppress_ms: FLAP_MAX_SUPPRESS_MS_DEFAULT,
        }
    }
}

impl FlapDamping {
    /// The largest penalty kept: the one that decays to `reuse` in
    /// exactly `max_suppress_ms`.
    pub fn ceiling(&self) -> f64 {
        let halvings = self.max_suppress_ms as f64 / self.half_life_ms as f64;
        f64::from(self.reuse) * halvings.exp2()
    }

    /// Range checks (the caller prefixes the key).
    pub fn validate(&self) -> Result<(), FixConfigError> {
        let day = 86_400_000;
        if self.stable_ms > day || self.max_suppress_ms > day {
            let keys = "flap_stable_ms and flap_max_suppress_ms";
            return Err(key(keys, format!("at most {day} (a day)")));
        }
        if self.half_life_ms == 0 || self.half_life_ms > day {
            return Err(key("flap_half_life_ms", format!("must be 1..={day}")));
        }
        if self.reuse == 0 || self.reuse >= self.suppress || self.suppress > FLAP_THRESHOLD_MAX {
            let why = format!("need 1 <= flap_reuse < flap_suppress <= {FLAP_THRESHOLD_MAX}");
            return Err(key("flap damping", why));
        }
        // A provider must be able to reach `suppress` below the ceiling,
        // and the ceiling must stay a finite, sane number.
        if self.max_suppress_ms / self.half_life_ms > 32
            || self.ceiling() < f64::from(self.suppress)
        {
            return Err(key(
                "flap_max_suppress_ms",
                "between the time flap_suppress needs to decay to flap_reuse and 32 half-lives",
            ));
        }
        Ok(())
    }

    pub(crate) fn from_file(f: &FixProviderFile) -> FlapDamping {
        let d = FlapDamping::default();
        FlapDamping {
            stable_ms: f.flap_stable_ms.unwrap_or(d.stable_ms),
            half_life_ms: f.flap_half_life_ms.unwrap_or(d.half_life_ms),
            suppress: f.flap_suppress.unwrap_or(d.suppress),
            reuse: f.flap_reuse.unwrap_or(d.reuse),
            max_suppress_ms: f.flap_max_suppress_ms.unwrap_or(d.max_suppress_ms),
        }
    }
}

/// The gray rule: a provider whose last quote keeps aging past the
/// engine's `max_quote_age_ms` (in the price, out, in again) is gray —
/// out of the price — after `lapses` such lapses within `window_ms`, and
/// is no longer gray once its quotes have stayed fresh for `clear_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrayRule {
    /// The engine's max quote age (`[engine] max_quote_age_ms`, or
    /// `--max-quote-age-ms`), in ms: copied here, never set on its own.
    pub max_quote_age_ms: u64,
    /// Lapses within the window that make the provider gray; 0: off.
    pub lapses: u32,
    /// Window of the lapse count, in ms.
    pub window_ms: u64,
    /// Fresh quotes for this long end gray, in ms.
    pub clear_ms: u64,
}

impl Default for GrayRule {
    fn default() -> Self {
        GrayRule {
            max_quote_age_ms: crate::config::MAX_QUOTE_AGE_MS_DEFAULT,
            lapses: GRAY_LAPSES_DEFAULT,
            window_ms: GRAY_WINDOW_MS_DEFAULT,
            clear_ms: GRAY_CLEAR_MS_DEFAULT,
        }
    }
}

impl GrayRule {
    /// Range checks (the caller prefixes the key).
    pub fn validate(&self) -> Result<(), FixConfigError> {
        let day = 86_400_000;
        if self.lapses > GRAY_LAPSES_MAX {
            return Err(key("gray_lapses", format!("must be 0..={GRAY_LAPSES_MAX}")));
        }
        for (k, v) in [
            ("gray_window_ms", self.window_ms),
            ("gray_clear_ms", self.clear_ms),
            ("max_quote_age_ms", self.max_quote_age_ms),
        ] {
            if v == 0 || v > day {
                return Err(key(k, format!("must be 1..={day}")));
            }
        }
        Ok(())
    }

    pub(crate) fn from_file(f: &FixProviderFile) -> GrayRule {
        let d = GrayRule::default();
        GrayRule {
            max_quote_age_ms: d.max_quote_age_ms,
            lapses: f.gray_lapses.unwrap_or(d.lapses),
            window_ms: f.gray_window_ms.unwrap_or(d.window_ms),
            clear_ms: f.gray_clear_ms.unwrap_or(d.clear_ms),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_the_ceiling_decays_to_reuse_in_max_suppress() {
        let d = FlapDamping::default();
        d.validate().unwrap();
        assert_eq!(d.ceiling(), 24_000.0, "750 x 2^(300 s / 60 s)");
        GrayRule::default().validate().unwrap();
    }

    #[test]
    fn bad_damping_is_refused() {
        let d = FlapDamping::default();
        for bad in [
            FlapDamping { reuse: 0, ..d },
            FlapDamping { reuse: 1_500, ..d },
            FlapDamping {
                half_life_ms: 0,
                ..d
            },
            FlapDamping {
                max_suppress_ms: 10_000,
                ..d
            },
            FlapDamping {
                max_suppress_ms: 86_400_000,
                half_life_ms: 1_000,
                ..d
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        let off = FlapDamping { stable_ms: 0, ..d };
        off.validate().unwrap();
        let g = GrayRule::default();
        assert!(GrayRule { clear_ms: 0, ..g }.validate().is_err());
        let e = GrayRule { lapses: 5_000, ..g }.validate().unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("gray_lapses: must be 0..={GRAY_LAPSES_MAX}")
        );
        assert!(
            matches!(
                e,
                FixConfigError::Key {
                    key: "gray_lapses",
                    ..
                }
            ),
            "{e:?}"
        );
        GrayRule { lapses: 0, ..g }.validate().unwrap();
    }
}
