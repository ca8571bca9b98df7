use super::*;
use rand::rngs::SmallRng;
use rand::SeedableRng;

fn rng(seed: u64) -> SmallRng {
    SmallRng::seed_from_u64(seed)
}

#[test]
fn ordinal_parsing_cases() {
    assert_eq!(parse_ordinal("pricewire-7"), Some(7));
    assert_eq!(parse_ordinal("pricewire-0"), Some(0));
    assert_eq!(parse_ordinal("price-wire-eu-12"), Some(12));
    assert_eq!(parse_ordinal("pricewire-9999"), Some(9999));
    // Deployment-style names: random suffix, possibly all digits.
    assert_eq!(parse_ordinal("pricewire-5d8f7c9b6-x7kq2"), None);
    assert_eq!(parse_ordinal("pricewire-5d8f7c9b6-24567"), None);
    assert_eq!(parse_ordinal("pricewire-07"), None);
    assert_eq!(parse_ordinal("pricewire-"), None);
    assert_eq!(parse_ordinal("-7"), None);
    assert_eq!(parse_ordinal("pricewire"), None);
    assert_eq!(parse_ordinal("pricewire-+7"), None);
    assert_eq!(parse_ordinal(""), None);
}

#[test]
fn cap_holds_for_120_instances() {
    let cfg = StaggerConfig::default();
    let mut previous = 0;
    for ordinal in 0..120u32 {
        let name = format!("pricewire-{ordinal}");
        let p = plan(&cfg, None, Some(&name), &mut rng(u64::from(ordinal)));
        assert_eq!(p.source, SlotSource::PodOrdinal(ordinal));
        assert!(
            p.slot_delay_ms <= cfg.cap_ms,
            "{ordinal}: {}",
            p.slot_delay_ms
        );
        assert!(
            p.delay_ms() <= cfg.cap_ms + cfg.jitter_ms,
            "{ordinal}: {}",
            p.delay_ms()
        );
        assert!(
            p.slot_delay_ms >= previous,
            "slot delay grows with the ordinal"
        );
        previous = p.slot_delay_ms;
    }
    assert_eq!(previous, cfg.cap_ms, "the last instances sit at the cap");
}

#[test]
fn explicit_ordinal_wins_over_pod_name() {
    let cfg = StaggerConfig::default();
    let p = plan(&cfg, Some(3), Some("pricewire-9"), &mut rng(1));
    assert_eq!((p.source, p.slot_delay_ms), (SlotSource::Ordinal(3), 1_500));
}

#[test]
fn without_ordinal_or_name_there_is_no_slot_delay() {
    let cfg = StaggerConfig {
        jitter_ms: 0,
        ..StaggerConfig::default()
    };
    let p = plan(&cfg, None, None, &mut rng(1));
    assert_eq!((p.delay_ms(), p.source), (0, SlotSource::None));
}

#[test]
fn zero_jitter_with_hashed_slots_is_raised() {
    let cfg = StaggerConfig {
        jitter_ms: 0,
        ..StaggerConfig::default()
    };
    let hashed = plan(&cfg, None, Some("pricewire-5d8f7c9b6-x7kq2"), &mut rng(1));
    assert!(matches!(hashed.source, SlotSource::Hashed { slots: 30 }));
    assert!(hashed.jitter_raised);
    assert_eq!(hashed.jitter_bound_ms, DEFAULT_STAGGER_JITTER_MS);
    let ordinal = plan(&cfg, None, Some("pricewire-4"), &mut rng(1));
    assert!(!ordinal.jitter_raised && ordinal.jitter_ms == 0);
}

#[test]
fn hash_is_stable_across_builds() {
    // Published FNV-1a 64 test vectors.
    assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
    assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
    assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
}

/// Deployment-style pod name: `<name>-<10 char template hash>-<5 char suffix>`
/// from Kubernetes' suffix alphabet.
fn deployment_pod_name(r: &mut SmallRng, template_hash: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let suffix: String = (0..5)
        .map(|_| ALPHABET[r.gen_range(0..ALPHABET.len())] as char)
        .collect();
    format!("pricewire-{template_hash}-{suffix}")
}

/// Largest number of start times within any `window_ms`.
fn worst_window(starts_ms: &mut [u64], window_ms: u64) -> usize {
    starts_ms.sort_unstable();
    (0..starts_ms.len())
        .map(|i| {
            starts_ms[i..]
                .iter()
                .take_while(|&&s| s < starts_ms[i] + window_ms)
                .count()
        })
        .max()
        .unwrap_or(0)
}

#[test]
fn hashed_slots_plus_jitter_spread_20_pods() {
    const PODS: usize = 20;
    const FLEETS: u64 = 500;
    const WINDOW_MS: u64 = 100;
    let cfg = StaggerConfig::default();
    let slots = hashed_slots(&cfg) as usize;
    let (mut worst_slot, mut worst_in_window) = (0, 0);
    let (mut sum_worst_slot, mut sum_worst_uniform) = (0, 0);
    for fleet in 0..FLEETS {
        let mut names = rng(fleet);
        let mut jitter = rng(fleet + 1_000_000);
        let mut uniform = rng(fleet + 2_000_000);
        let (mut per_slot, mut per_uniform_slot) = (vec![0usize; slots], vec![0usize; slots]);
        let mut starts_ms = Vec::with_capacity(PODS);
        for _ in 0..PODS {
            let name = deployment_pod_name(&mut names, "5d8f7c9b6f");
            let p = plan(&cfg, None, Some(&name), &mut jitter);
            per_slot[p.slot as usize] += 1;
            per_uniform_slot[uniform.gen_range(0..slots)] += 1;
            starts_ms.push(p.delay_ms());
        }
        let fleet_worst = *per_slot.iter().max().unwrap();
        worst_slot = worst_slot.max(fleet_worst);
        worst_in_window = worst_in_window.max(worst_window(&mut starts_ms, WINDOW_MS));
        sum_worst_slot += fleet_worst;
        sum_worst_uniform += *per_uniform_slot.iter().max().unwrap();
    }
    let mean_worst = sum_worst_slot as f64 / FLEETS as f64;
    let mean_worst_uniform = sum_worst_uniform as f64 / FLEETS as f64;
    println!(
        "{PODS} pods in {slots} hashed slots, {FLEETS} fleets: worst slot collision {worst_slot} pods \
         (mean worst {mean_worst:.2}, ideal uniform {mean_worst_uniform:.2}); \
         after jitter at most {worst_in_window} pods start within any {WINDOW_MS} ms"
    );
    // Balls in bins: 20 into 30 gives a typical maximum of 2-3 and P(max >= 7)
    // near 1e-4 per fleet; the hash must do as well as ideal random slots.
    assert!(worst_slot <= 7, "worst slot {worst_slot}");
    assert!(
        mean_worst <= mean_worst_uniform + 0.25,
        "{mean_worst} vs {mean_worst_uniform}"
    );
    // Jitter spreads a colliding slot: fewer pods share any 100 ms than share a slot.
    assert!(
        worst_in_window < worst_slot,
        "{worst_in_window} vs {worst_slot}"
    );
}
