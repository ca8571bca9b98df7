//! Staggered start-up: after a deploy restarts every instance, they must not
//! all come up (and take every reconnecting terminal) in the same second.
//!
//! Each instance waits `min(slot × step, cap) + jitter` before it turns
//! ready. The slot is the instance's ordinal (`--ordinal`, or the suffix of
//! a StatefulSet pod name, `pricewire-7` → 7). Without one, the pod name is
//! hashed (FNV-1a, stable across builds) into `cap / step` slots — hashes
//! collide, so then jitter is mandatory: a zero jitter is raised to
//! [`DEFAULT_STAGGER_JITTER_MS`] with a log line. Pure computation; the
//! caller waits (with `/startupz` answering 503 meanwhile).

use rand::Rng;

/// Default delay per slot.
pub const DEFAULT_STAGGER_STEP_MS: u64 = 500;
/// Default largest slot delay (before jitter).
pub const DEFAULT_STAGGER_CAP_MS: u64 = 15_000;
/// Default largest jitter added to the slot delay.
pub const DEFAULT_STAGGER_JITTER_MS: u64 = 500;
/// Largest ordinal suffix read from a pod name. Deployment pod names end in
/// a 5-character random suffix that can be all digits; StatefulSet ordinals
/// of 10 000 or more do not occur in practice, so a suffix of 5 or more
/// digits is not taken for an ordinal.
pub const ORDINAL_SUFFIX_DIGITS_MAX: usize = 4;

/// Stagger parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StaggerConfig {
    /// Start-up delay per slot, in ms.
    pub step_ms: u64,
    /// Largest slot delay, in ms; 0 turns the slot delay off.
    pub cap_ms: u64,
    /// Largest random delay added to the slot delay, in ms.
    pub jitter_ms: u64,
}

impl Default for StaggerConfig {
    fn default() -> Self {
        StaggerConfig {
            step_ms: DEFAULT_STAGGER_STEP_MS,
            cap_ms: DEFAULT_STAGGER_CAP_MS,
            jitter_ms: DEFAULT_STAGGER_JITTER_MS,
        }
    }
}

/// Where the slot came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotSource {
    /// `--ordinal`.
    Ordinal(u32),
    /// The numeric suffix of the pod name.
    PodOrdinal(u32),
    /// The pod name hashed into `slots` slots.
    Hashed {
        /// Slots the hash is taken modulo.
        slots: u64,
    },
    /// No ordinal and no pod name (a local run): no slot delay.
    None,
}

/// The chosen delay and how it was reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaggerPlan {
    /// Where the slot came from.
    pub source: SlotSource,
    /// The slot; 0 when there is none.
    pub slot: u64,
    /// `slot × step_ms`, capped at `cap_ms`.
    pub slot_delay_ms: u64,
    /// The jitter bound actually used (raised from 0 for hashed slots).
    pub jitter_bound_ms: u64,
    /// The random delay drawn in `0..=jitter_bound_ms`.
    pub jitter_ms: u64,
    /// True when a jitter of 0 was raised to the default because slots are hashed.
    pub jitter_raised: bool,
}

impl StaggerPlan {
    /// Total wait before serving.
    pub fn delay_ms(&self) -> u64 {
        self.slot_delay_ms + self.jitter_ms
    }
}

/// `pricewire-7` → 7. The suffix after the last `-` must be 1 to
/// [`ORDINAL_SUFFIX_DIGITS_MAX`] decimal digits without a leading zero
/// (except `0` itself), and a non-empty name must precede it.
pub(crate) fn parse_ordinal(pod_name: &str) -> Option<u32> {
    let (name, suffix) = pod_name.rsplit_once('-')?;
    let digits_only = !suffix.is_empty() && suffix.bytes().all(|b| b.is_ascii_digit());
    let canonical = suffix == "0" || !suffix.starts_with('0');
    if name.is_empty() || !digits_only || !canonical || suffix.len() > ORDINAL_SUFFIX_DIGITS_MAX {
        return None;
    }
    suffix.parse().ok()
}

/// FNV-1a 64: stable across Rust versions and platforms (unlike
/// `DefaultHasher`), so a pod keeps its slot from one build to the next.
pub(crate) fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Number of hashed slots: `cap / step`, at least 1.
pub(crate) fn hashed_slots(cfg: &StaggerConfig) -> u64 {
    cfg.cap_ms.checked_div(cfg.step_ms).unwrap_or(0).max(1)
}

fn choose_slot(
    cfg: &StaggerConfig,
    ordinal: Option<u32>,
    pod_name: Option<&str>,
) -> (SlotSource, u64) {
    if let Some(n) = ordinal {
        return (SlotSource::Ordinal(n), u64::from(n));
    }
    let Some(name) = pod_name.filter(|n| !n.is_empty()) else {
        return (SlotSource::None, 0);
    };
    if let Some(n) = parse_ordinal(name) {
        return (SlotSource::PodOrdinal(n), u64::from(n));
    }
    let slots = hashed_slots(cfg);
    (
        SlotSource::Hashed { slots },
        fnv1a64(name.as_bytes()) % slots,
    )
}

/// Plans this instance's start-up delay. `rng` draws the jitter.
pub fn plan(
    cfg: &StaggerConfig,
    ordinal: Option<u32>,
    pod_name: Option<&str>,
    rng: &mut impl Rng,
) -> StaggerPlan {
    let (source, slot) = choose_slot(cfg, ordinal, pod_name);
    let slot_delay_ms = slot.saturating_mul(cfg.step_ms).min(cfg.cap_ms);
    let hashed = matches!(source, SlotSource::Hashed { .. });
    let jitter_raised = hashed && cfg.jitter_ms == 0;
    let jitter_bound_ms = if jitter_raised {
        DEFAULT_STAGGER_JITTER_MS
    } else {
        cfg.jitter_ms
    };
    if jitter_raised {
        tracing::warn!(
            jitter_ms = jitter_bound_ms,
            "stagger jitter 0 with hashed slots: hashes collide, raising jitter to the default"
        );
    }
    let jitter_ms = if jitter_bound_ms == 0 {
        0
    } else {
        rng.gen_range(0..=jitter_bound_ms)
    };
    let plan = StaggerPlan {
        source,
        slot,
        slot_delay_ms,
        jitter_bound_ms,
        jitter_ms,
        jitter_raised,
    };
    tracing::info!(source = ?plan.source, slot, delay_ms = plan.delay_ms(), "start-up stagger");
    plan
}

#[cfg(test)]
mod tests;
