//! Brute-force lockout and argon2 verifier flags of `pricewire serve`
//! (docs/security.md, "Limits and what each stops"). The defaults are the
//! constants of [`crate::auth`]; every value is range-checked, and a
//! refusal names the flag.

use clap::Args;

use super::ArgsError;

use crate::auth::hash::{CostWindow, M_COST_KIB, P_COST, T_COST};
use crate::auth::lockout::{LockoutPolicy, WAYS};
use crate::auth::verifier::{
    FEED_QUEUE_DEFAULT, QUEUE_DEFAULT, QUEUE_MAX, WORKERS_DEFAULT, WORKERS_MAX,
};
use crate::auth::AuthLimits;

const ADDRESS: LockoutPolicy = LockoutPolicy::ADDRESS;
const ACCOUNT: LockoutPolicy = LockoutPolicy::ACCOUNT;
/// Longest lock and window: one day, in ms.
const DAY_MS: u64 = 86_400_000;
/// Most slots of a lockout table (40 bytes each: 40 MiB).
pub const LOCKOUT_TABLE_MAX: usize = 1 << 20;

/// The flags (see the module docs).
#[derive(Debug, Clone, Args)]
pub struct AuthArgs {
    /// Failed logons from one address that lock it (per --lockout-window-ms).
    /// Failed logons from one address (IPv6: one /64) within
    /// --lockout-window-ms that lock it, on the subscriber and the provider
    /// listener, 1..=1000.
    #[arg(long, default_value_t = ADDRESS.threshold, value_name = "N")]
    pub lockout_failures: u32,

    /// Failed logons of one account that lock it (per --lockout-window-ms).
    /// Failed logons of one account (from any address) within
    /// --lockout-window-ms that lock it, subscriber listener, 1..=100000.
    #[arg(long, default_value_t = ACCOUNT.threshold, value_name = "N")]
    pub lockout_account_failures: u32,

    /// Window the failures are counted in, from the first, in ms. Range
    /// 1000..=86400000.
    #[arg(long, default_value_t = ADDRESS.window_ms, value_name = "MS")]
    pub lockout_window_ms: u64,

    /// Length of the first lock, in ms (later locks double it). Each later
    /// failure after a lock locks again for twice as long (+0-25 % jitter),
    /// 1..=--lockout-max-ms.
    #[arg(long, default_value_t = ADDRESS.base_ms, value_name = "MS")]
    pub lockout_first_ms: u64,

    /// Longest lock, in milliseconds, up to 86400000 (a day).
    #[arg(long, default_value_t = ADDRESS.cap_ms, value_name = "MS")]
    pub lockout_max_ms: u64,

    /// Time without a failure after which a lockout starts over, in ms. An
    /// address or account with no failure for this long starts over at
    /// --lockout-first-ms, in milliseconds: at least 1.25 × --lockout-max-ms (a
    /// lock at the cap with its jitter is not forgotten while it lasts), at
    /// most 604800000 (a week).
    #[arg(long, default_value_t = ADDRESS.forget_ms, value_name = "MS")]
    pub lockout_forget_ms: u64,

    /// Addresses tracked at once per listener (fixed memory, 40 bytes each). A
    /// flood of others pushes out unlocked ones first; 8..=1048576, rounded up
    /// to a multiple of 8.
    #[arg(long, default_value_t = ADDRESS.capacity, value_name = "N")]
    pub lockout_addresses: usize,

    /// Accounts tracked at once, 8..=1048576, rounded up to a multiple
    /// of 8.
    #[arg(long, default_value_t = ACCOUNT.capacity, value_name = "N")]
    pub lockout_accounts: usize,

    /// Threads verifying subscriber logons' argon2id hashes (`pw-auth<N>`).
    /// Range 1..=32; each verification holds 19 MiB while it runs.
    #[arg(long, default_value_t = WORKERS_DEFAULT, value_name = "N")]
    pub verifier_threads: usize,

    /// Subscriber logons waiting for a verifier thread, at most. One more gets
    /// LogonRejected(busy), 1..=65536.
    #[arg(long, default_value_t = QUEUE_DEFAULT, value_name = "N")]
    pub verifier_queue: usize,

    /// Provider logons waiting for the provider verifier thread, at most. The
    /// thread is `pw-provauth0`; one more gets LogonRejected(busy), 1..=65536.
    #[arg(long, default_value_t = FEED_QUEUE_DEFAULT, value_name = "N")]
    pub feed_verifier_queue: usize,

    /// Most memory a stored argon2id hash may ask for, in KiB. A stored hash is
    /// one in the config file or a Redis record; a hash asking more makes its
    /// account's record invalid and is never run, 19456..=1048576.
    #[arg(long, default_value_t = CostWindow::DEFAULT.memory_kib_max, value_name = "KIB")]
    pub argon2_max_memory_kib: u32,

    /// Most passes (t) a stored argon2id hash may ask for, 2..=64.
    #[arg(long, default_value_t = CostWindow::DEFAULT.time_max, value_name = "N")]
    pub argon2_max_time: u32,

    /// Most lanes (p) a stored argon2id hash may ask for, 1..=64.
    #[arg(long, default_value_t = CostWindow::DEFAULT.parallelism_max, value_name = "N")]
    pub argon2_max_parallelism: u32,
}

impl AuthArgs {
    /// The subscriber listener's limits.
    ///
    /// # Errors
    /// A value out of its range, naming the flag.
    pub fn limits(&self) -> Result<AuthLimits, ArgsError> {
        self.check()?;
        let policy = |threshold, capacity| LockoutPolicy {
            threshold,
            window_ms: self.lockout_window_ms,
            base_ms: self.lockout_first_ms,
            cap_ms: self.lockout_max_ms,
            forget_ms: self.lockout_forget_ms,
            capacity,
        };
        Ok(AuthLimits {
            address: policy(self.lockout_failures, self.lockout_addresses),
            account: policy(self.lockout_account_failures, self.lockout_accounts),
            verifier_threads: self.verifier_threads,
            verifier_queue: self.verifier_queue,
        })
    }

    /// The provider listener's limits: the same address lockout, one
    /// verifier thread, --feed-verifier-queue waiting.
    ///
    /// # Errors
    /// As [`AuthArgs::limits`].
    pub fn feed_limits(&self) -> Result<AuthLimits, ArgsError> {
        Ok(AuthLimits {
            verifier_threads: 1,
            verifier_queue: self.feed_verifier_queue,
            ..self.limits()?
        })
    }

    /// The argon2 cost window stored hashes must fit
    /// ([`crate::auth::hash::set_cost_window`]).
    ///
    /// # Errors
    /// As [`AuthArgs::limits`].
    pub fn cost_window(&self) -> Result<CostWindow, ArgsError> {
        self.check()?;
        Ok(CostWindow {
            memory_kib_max: self.argon2_max_memory_kib,
            time_max: self.argon2_max_time,
            parallelism_max: self.argon2_max_parallelism,
        })
    }

    fn check(&self) -> Result<(), ArgsError> {
        let (first, max) = (self.lockout_first_ms, self.lockout_max_ms);
        let table = WAYS as u64..=LOCKOUT_TABLE_MAX as u64;
        let queue = 1..=QUEUE_MAX as u64;
        let ranges = [
            (
                "--lockout-failures",
                u64::from(self.lockout_failures),
                1..=1_000,
            ),
            (
                "--lockout-account-failures",
                u64::from(self.lockout_account_failures),
                1..=100_000,
            ),
            (
                "--lockout-window-ms",
                self.lockout_window_ms,
                1_000..=DAY_MS,
            ),
            ("--lockout-max-ms", max, 1..=DAY_MS),
            ("--lockout-first-ms", first, 1..=max),
            (
                "--lockout-forget-ms",
                self.lockout_forget_ms,
                max + max / 4..=7 * DAY_MS,
            ),
            (
                "--lockout-addresses",
                self.lockout_addresses as u64,
                table.clone(),
            ),
            ("--lockout-accounts", self.lockout_accounts as u64, table),
            (
                "--verifier-threads",
                self.verifier_threads as u64,
                1..=WORKERS_MAX as u64,
            ),
            (
                "--verifier-queue",
                self.verifier_queue as u64,
                queue.clone(),
            ),
            (
                "--feed-verifier-queue",
                self.feed_verifier_queue as u64,
                queue,
            ),
            // The floors admit every hash `pricewire token hash` makes.
            (
                "--argon2-max-memory-kib",
                u64::from(self.argon2_max_memory_kib),
                u64::from(M_COST_KIB)..=u64::from(CostWindow::MEMORY_KIB_CEILING),
            ),
            (
                "--argon2-max-time",
                u64::from(self.argon2_max_time),
                u64::from(T_COST)..=u64::from(CostWindow::TIME_CEILING),
            ),
            (
                "--argon2-max-parallelism",
                u64::from(self.argon2_max_parallelism),
                u64::from(P_COST)..=u64::from(CostWindow::PARALLELISM_CEILING),
            ),
        ];
        for (flag, v, range) in ranges {
            if !range.contains(&v) {
                return Err(ArgsError::value(
                    flag,
                    v,
                    format!("must be {}..={}{}", range.start(), range.end(), why(flag)),
                ));
            }
        }
        Ok(())
    }
}

/// What a bound that depends on another flag means.
fn why(flag: &str) -> &'static str {
    match flag {
        "--lockout-first-ms" => " (at most --lockout-max-ms)",
        "--lockout-forget-ms" => {
            " (at least 1.25 x --lockout-max-ms, so that a lock at the cap is not \
             forgotten before it ends)"
        }
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        auth: AuthArgs,
    }

    fn parse(flags: &[&str]) -> AuthArgs {
        let argv = std::iter::once("serve").chain(flags.iter().copied());
        Cli::try_parse_from(argv).unwrap().auth
    }

    #[test]
    fn the_defaults_are_the_documented_constants() {
        let l = parse(&[]).limits().unwrap();
        assert_eq!(l, AuthLimits::default());
        assert_eq!(l.address, LockoutPolicy::ADDRESS);
        assert_eq!(l.account, LockoutPolicy::ACCOUNT);
        let f = parse(&[]).feed_limits().unwrap();
        assert_eq!(f, AuthLimits::feed_default());
        assert_eq!(parse(&[]).cost_window().unwrap(), CostWindow::DEFAULT);
        assert_eq!((f.verifier_threads, f.verifier_queue), (1, 8));
    }

    #[test]
    fn flags_set_both_scopes() {
        let l = parse(&[
            "--lockout-failures=2",
            "--lockout-account-failures=3",
            "--lockout-window-ms=5000",
            "--lockout-first-ms=200",
            "--lockout-max-ms=800",
            "--lockout-forget-ms=1000",
            "--lockout-addresses=64",
            "--lockout-accounts=16",
            "--verifier-threads=2",
            "--verifier-queue=4",
            "--feed-verifier-queue=3",
            "--argon2-max-memory-kib=32768",
            "--argon2-max-time=3",
            "--argon2-max-parallelism=2",
        ]);
        let w = l.cost_window().unwrap();
        assert_eq!(
            (w.memory_kib_max, w.time_max, w.parallelism_max),
            (32_768, 3, 2)
        );
        let s = l.limits().unwrap();
        assert_eq!((s.address.threshold, s.account.threshold), (2, 3));
        for p in [s.address, s.account] {
            assert_eq!(
                (p.window_ms, p.base_ms, p.cap_ms, p.forget_ms),
                (5_000, 200, 800, 1_000)
            );
        }
        assert_eq!((s.address.capacity, s.account.capacity), (64, 16));
        assert_eq!((s.verifier_threads, s.verifier_queue), (2, 4));
        let f = l.feed_limits().unwrap();
        assert_eq!((f.verifier_threads, f.verifier_queue), (1, 3));
        assert_eq!(f.address, s.address);
    }

    #[test]
    fn out_of_range_values_are_refused_naming_the_flag() {
        let cases: [(&[&str], &str); 16] = [
            (
                &["--argon2-max-memory-kib=19455"],
                "--argon2-max-memory-kib 19455: must be 19456..=1048576",
            ),
            (
                &["--argon2-max-time=1"],
                "--argon2-max-time 1: must be 2..=64",
            ),
            (
                &["--argon2-max-parallelism=65"],
                "--argon2-max-parallelism 65: must be 1..=64",
            ),
            (
                &["--lockout-failures=0"],
                "--lockout-failures 0: must be 1..=1000",
            ),
            (
                &["--lockout-account-failures=0"],
                "--lockout-account-failures 0",
            ),
            (
                &["--lockout-window-ms=999"],
                "--lockout-window-ms 999: must be 1000..=86400000",
            ),
            (&["--lockout-max-ms=0"], "--lockout-max-ms 0"),
            (&["--lockout-max-ms=86400001"], "--lockout-max-ms 86400001"),
            (&["--lockout-first-ms=0"], "--lockout-first-ms 0"),
            (&["--lockout-first-ms=300001"], "(at most --lockout-max-ms)"),
            (
                &["--lockout-forget-ms=374999"],
                "--lockout-forget-ms 374999: must be 375000..=",
            ),
            (
                &["--lockout-addresses=7"],
                "--lockout-addresses 7: must be 8..=1048576",
            ),
            (
                &["--lockout-accounts=1048577"],
                "--lockout-accounts 1048577",
            ),
            (
                &["--verifier-threads=0"],
                "--verifier-threads 0: must be 1..=32",
            ),
            (
                &["--verifier-queue=0"],
                "--verifier-queue 0: must be 1..=65536",
            ),
            (
                &["--feed-verifier-queue=65537"],
                "--feed-verifier-queue 65537",
            ),
        ];
        for (flags, want) in cases {
            let a = parse(flags);
            let err = a
                .limits()
                .and_then(|_| a.feed_limits())
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{flags:?}: {err}");
        }
    }

    /// docs/security.md's flag table lists every flag with its default.
    #[test]
    fn the_security_doc_lists_every_flag_with_its_default() {
        use clap::CommandFactory;
        let doc = include_str!("../../docs/security.md");
        let cmd = Cli::command();
        for arg in cmd.get_arguments().filter(|a| a.get_long().is_some()) {
            let long = format!("`--{}`", arg.get_long().unwrap());
            let default = arg.get_default_values()[0].to_string_lossy().into_owned();
            let first = format!("| {long} |");
            let row = doc.lines().find(|l| l.starts_with(&first));
            let row = row.unwrap_or_else(|| panic!("docs/security.md has no row for {long}"));
            let cell = format!("| {default} |");
            assert!(
                row.contains(&cell),
                "{long}: default {default} not in {row}"
            );
        }
    }
}
