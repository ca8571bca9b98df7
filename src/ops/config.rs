//! Command-line flags of the operations layer, for `#[command(flatten)]`.
//!
//! Every default is a named constant shared with the deploy manifests' test,
//! and [`OpsArgs::validate`] refuses inconsistent values with a message that
//! names the flag, the value and the rule.

use crate::ops::http::DEFAULT_OPS_LISTEN;
use crate::ops::shutdown::{
    ShutdownBudgets, DEFAULT_DRAIN_DELAY_MS, DEFAULT_GRACE_MS, MIN_SHUTDOWN_WORK_MS,
};
use crate::ops::stagger::{
    StaggerConfig, DEFAULT_STAGGER_CAP_MS, DEFAULT_STAGGER_JITTER_MS, DEFAULT_STAGGER_STEP_MS,
};
use crate::ops::OpsError;
use crate::runtime::supervise::{STAGE_EXIT_GRACE_MS_DEFAULT, STAGE_EXIT_GRACE_MS_MAX};
use std::net::SocketAddr;

/// Largest accepted `--drain-delay-ms`.
pub(crate) const DRAIN_DELAY_MS_MAX: u64 = 120_000;
/// Largest accepted `--grace-ms`.
pub(crate) const GRACE_MS_MAX: u64 = 300_000;
/// Largest accepted `--stagger-cap-ms`.
pub(crate) const STAGGER_CAP_MS_MAX: u64 = 300_000;
/// Largest accepted `--stagger-jitter-ms`.
pub(crate) const STAGGER_JITTER_MS_MAX: u64 = 60_000;
/// Longest pod name (a DNS subdomain).
pub(crate) const POD_NAME_LEN_MAX: usize = 253;
/// Time a started container may take to reach the stagger wait (process
/// start, config load, instrument table, binding): the deploy manifests'
/// startupProbe covers stagger cap + jitter + this.
pub const STARTUP_ALLOWANCE_MS: u64 = 10_000;

/// Ops flags of `pricewire serve`.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct OpsArgs {
    /// Address of the ops HTTP listener (/livez, /readyz, /startupz, /metrics).
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_OPS_LISTEN)]
    pub ops_listen: SocketAddr,
    /// Delay from failing readiness to closing listeners on SIGTERM, in ms.
    /// After the first SIGTERM/SIGINT: readiness fails at once, serving goes on
    /// this long.
    #[arg(long, value_name = "MS", default_value_t = DEFAULT_DRAIN_DELAY_MS)]
    pub drain_delay_ms: u64,
    /// Total shutdown budget from the first signal to exit, in ms. It includes
    /// the drain delay.
    #[arg(long, value_name = "MS", default_value_t = DEFAULT_GRACE_MS)]
    pub grace_ms: u64,
    /// Start-up delay per ordinal slot, in ms.
    #[arg(long, value_name = "MS", default_value_t = DEFAULT_STAGGER_STEP_MS)]
    pub stagger_step_ms: u64,
    /// Largest slot delay, in ms; 0 turns the slot delay off.
    #[arg(long, value_name = "MS", default_value_t = DEFAULT_STAGGER_CAP_MS)]
    pub stagger_cap_ms: u64,
    /// Largest random delay added to the slot delay, in ms. It is raised to the
    /// default when slots are hashed.
    #[arg(long, value_name = "MS", default_value_t = DEFAULT_STAGGER_JITTER_MS)]
    pub stagger_jitter_ms: u64,
    /// This instance's ordinal (slot); default: the pod name's numeric suffix.
    #[arg(long, value_name = "N")]
    pub ordinal: Option<u32>,
    /// Pod name, hashed into a slot when it has no ordinal suffix. Default:
    /// $HOSTNAME.
    #[arg(long, value_name = "NAME")]
    pub pod_name: Option<String>,
    /// Time from a stage dying to the process exiting (code 70), in ms. After a
    /// stage dies: /livez fails and the recorder flushes for this long, then
    /// the process exits 70.
    #[arg(long, value_name = "MS", default_value_t = STAGE_EXIT_GRACE_MS_DEFAULT)]
    pub stage_exit_grace_ms: u64,
}

impl Default for OpsArgs {
    fn default() -> Self {
        OpsArgs {
            ops_listen: DEFAULT_OPS_LISTEN
                .parse()
                .expect("default ops address parses"),
            drain_delay_ms: DEFAULT_DRAIN_DELAY_MS,
            grace_ms: DEFAULT_GRACE_MS,
            stagger_step_ms: DEFAULT_STAGGER_STEP_MS,
            stagger_cap_ms: DEFAULT_STAGGER_CAP_MS,
            stagger_jitter_ms: DEFAULT_STAGGER_JITTER_MS,
            ordinal: None,
            pod_name: None,
            stage_exit_grace_ms: STAGE_EXIT_GRACE_MS_DEFAULT,
        }
    }
}

/// Validated ops settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpsConfig {
    /// Address of the ops HTTP listener.
    pub listen: SocketAddr,
    /// Time budgets of the shutdown steps.
    pub budgets: ShutdownBudgets,
    /// Start-up stagger settings.
    pub stagger: StaggerConfig,
    /// This instance's ordinal as given by `--ordinal`; `None` leaves the
    /// stagger to the pod name.
    pub ordinal: Option<u32>,
    /// The pod name (`--pod-name` or `$HOSTNAME`), if known.
    pub pod_name: Option<String>,
    /// How long a process whose stage died lingers before it exits, ms.
    pub stage_exit_grace_ms: u64,
}

fn invalid(flag: &'static str, reason: String) -> OpsError {
    OpsError::InvalidFlag { flag, reason }
}

fn at_most(flag: &'static str, value: u64, max: u64) -> Result<(), OpsError> {
    if value > max {
        return Err(invalid(flag, format!("{value} is above the maximum {max}")));
    }
    Ok(())
}

impl OpsArgs {
    /// Validates; the pod name falls back to the `HOSTNAME` environment variable.
    pub fn validate(&self) -> Result<OpsConfig, OpsError> {
        self.validate_with_env(|k| std::env::var(k).ok())
    }

    /// As [`OpsArgs::validate`] with an injected environment (for tests).
    pub fn validate_with_env(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<OpsConfig, OpsError> {
        at_most("--drain-delay-ms", self.drain_delay_ms, DRAIN_DELAY_MS_MAX)?;
        at_most("--grace-ms", self.grace_ms, GRACE_MS_MAX)?;
        at_most(
            "--stage-exit-grace-ms",
            self.stage_exit_grace_ms,
            STAGE_EXIT_GRACE_MS_MAX,
        )?;
        at_most("--stagger-cap-ms", self.stagger_cap_ms, STAGGER_CAP_MS_MAX)?;
        at_most(
            "--stagger-jitter-ms",
            self.stagger_jitter_ms,
            STAGGER_JITTER_MS_MAX,
        )?;
        if self.grace_ms < self.drain_delay_ms.saturating_add(MIN_SHUTDOWN_WORK_MS) {
            return Err(invalid(
                "--grace-ms",
                format!(
                    "{} must exceed --drain-delay-ms {} by at least {MIN_SHUTDOWN_WORK_MS} ms, \
                     the least time to stop accepting, finish requests, tell subscribers and close the recorder",
                    self.grace_ms, self.drain_delay_ms
                ),
            ));
        }
        if self.stagger_step_ms == 0 && self.stagger_cap_ms > 0 {
            return Err(invalid(
                "--stagger-step-ms",
                "0 with a non-zero --stagger-cap-ms; set the cap to 0 to turn slots off".into(),
            ));
        }
        let pod_name = self
            .pod_name
            .clone()
            .or_else(|| env("HOSTNAME"))
            .filter(|n| !n.is_empty());
        if let Some(name) = pod_name.as_deref().filter(|n| n.len() > POD_NAME_LEN_MAX) {
            return Err(invalid(
                "--pod-name",
                format!("{} characters, more than {POD_NAME_LEN_MAX}", name.len()),
            ));
        }
        Ok(OpsConfig {
            listen: self.ops_listen,
            budgets: ShutdownBudgets {
                drain_delay_ms: self.drain_delay_ms,
                grace_ms: self.grace_ms,
                ..ShutdownBudgets::default()
            },
            stagger: StaggerConfig {
                step_ms: self.stagger_step_ms,
                cap_ms: self.stagger_cap_ms,
                jitter_ms: self.stagger_jitter_ms,
            },
            ordinal: self.ordinal,
            pod_name,
            stage_exit_grace_ms: self.stage_exit_grace_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        ops: OpsArgs,
    }

    fn parse(args: &[&str]) -> OpsArgs {
        let argv = std::iter::once("pricewire").chain(args.iter().copied());
        Cli::try_parse_from(argv).unwrap().ops
    }

    #[test]
    fn defaults_match_the_named_constants() {
        assert_eq!(parse(&[]), OpsArgs::default());
        let cfg = OpsArgs::default().validate_with_env(|_| None).unwrap();
        assert_eq!(cfg.budgets.grace_ms, DEFAULT_GRACE_MS);
        assert_eq!(cfg.pod_name, None);
    }

    #[test]
    fn flags_parse_and_pod_name_falls_back_to_hostname() {
        let a = parse(&[
            "--ops-listen",
            "0.0.0.0:9401",
            "--grace-ms",
            "30000",
            "--ordinal",
            "3",
        ]);
        assert_eq!(a.ops_listen.port(), 9401);
        let cfg = a
            .validate_with_env(|k| (k == "HOSTNAME").then(|| "pricewire-9".into()))
            .unwrap();
        assert_eq!((cfg.budgets.grace_ms, cfg.ordinal), (30_000, Some(3)));
        assert_eq!(cfg.pod_name.as_deref(), Some("pricewire-9"));
        let b = parse(&["--pod-name", "explicit"])
            .validate_with_env(|_| Some("env".into()))
            .unwrap();
        assert_eq!(b.pod_name.as_deref(), Some("explicit"));
    }

    #[test]
    fn grace_not_above_drain_delay_is_refused_with_a_clear_message() {
        let a = parse(&["--drain-delay-ms", "5000", "--grace-ms", "5000"]);
        let err = a.validate_with_env(|_| None).unwrap_err().to_string();
        assert!(
            err.contains("--grace-ms") && err.contains("--drain-delay-ms 5000"),
            "{err}"
        );
    }

    #[test]
    fn out_of_range_values_are_refused() {
        for args in [
            &["--stagger-step-ms", "0"][..],
            &["--stagger-jitter-ms", "60001"][..],
            &["--grace-ms", "300001"][..],
            &["--stage-exit-grace-ms", "30001"][..],
        ] {
            assert!(parse(args).validate_with_env(|_| None).is_err(), "{args:?}");
        }
        assert!(parse(&["--stagger-step-ms", "0", "--stagger-cap-ms", "0"])
            .validate_with_env(|_| None)
            .is_ok());
        let grace = parse(&["--stage-exit-grace-ms", "0"]).validate_with_env(|_| None);
        assert_eq!(grace.unwrap().stage_exit_grace_ms, 0, "0: exit at once");
        let cli = Cli::try_parse_from(["pricewire", "--ops-listen", "nowhere"]);
        assert!(cli.is_err());
    }
}
