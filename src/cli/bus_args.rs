//! Flags of `serve --role core|edge` (docs/scale-out.md).

use clap::Args;

use super::ArgsError;

use crate::bus::{BusConfig, BusRole, Role, PREFIX_DEFAULT};

/// Role and bus flags of `pricewire serve`.
#[derive(Debug, Clone, Args)]
pub struct BusArgs {
    /// What this process is: `standalone`, `core` or `edge`. `standalone`:
    /// feeds, engine and subscribers in one process; `core`: feeds and engine,
    /// every price published to the bus, no subscriber listener; `edge`:
    /// subscribers served from the bus, no feeds.
    #[arg(long, value_enum, default_value_t = Role::Standalone)]
    pub role: Role,

    /// NATS servers of the bus (needed by `core` and `edge`).
    /// `nats://host:port[,nats://host:port…]`; `tls://host:port` for TLS. A URL
    /// with credentials in it is refused: give them with --bus-user and
    /// --bus-password-file, --bus-token-file, --bus-nkey-file or
    /// --bus-creds-file.
    #[arg(long, value_name = "URLS")]
    pub bus: Option<String>,

    /// Subject prefix: prices go to `<prefix>.price.<SYMBOL>`.
    #[arg(long, default_value = PREFIX_DEFAULT, value_name = "PREFIX")]
    pub bus_prefix: String,

    /// Copies of the last-value stream kept by the NATS cluster. Three on a
    /// 3-node cluster survive the loss of one node.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub bus_replicas: usize,

    /// Leader lease period of cores, in ms. It is how long the lease key
    /// outlives its holder's last write. One core publishes; the others stand
    /// by warm and take over after three missed heartbeats of a dead or frozen
    /// leader (1.0-1.6 s measured with the defaults), not after this period.
    /// The leader fences itself a tenth before it ends and renews every
    /// fifteenth, so the default outlasts a JetStream election of the lease
    /// bucket (3.9-7.8 s measured on a 3-node cluster).
    #[arg(long, default_value_t = crate::bus::LEASE_MS_DEFAULT, value_name = "MS")]
    pub bus_lease_ms: u64,

    /// Edge: silence on the bus before prices are flagged stale, in ms. It is
    /// how long without any price or heartbeat of the current lease epoch from
    /// the bus (no NATS server, or no live core) before every price is sent
    /// again flagged stale; the next fresh price clears the flag. Keep it at
    /// least twice the cores' --bus-heartbeat-ms.
    #[arg(long, default_value_t = crate::bus::MAX_AGE_MS_DEFAULT, value_name = "MS")]
    pub bus_max_age_ms: u64,

    /// Core: interval of the lease holder's heartbeat, in ms. The heartbeat
    /// goes on `<prefix>.heartbeat`, so edges tell a quiet market from a dead
    /// core (10..=150000; the default is a quarter of the default max age).
    #[arg(long, default_value_t = crate::bus::heartbeat::HEARTBEAT_MS_DEFAULT, value_name = "MS")]
    pub bus_heartbeat_ms: u64,

    /// Credentials and TLS of the bus.
    #[command(flatten)]
    pub security: crate::cli::bus_security_args::BusSecurityArgs,
}

/// What the rest of `serve` needs to know to check the role against.
pub(crate) struct RoleFacts {
    pub(crate) listens: bool,
    pub(crate) feed_listen: bool,
}

impl BusArgs {
    /// The bus side to run, or `None` for standalone; refuses flags that
    /// do not fit the role, naming them.
    pub(crate) fn bus_role(&self, facts: &RoleFacts) -> Result<Option<BusRole>, ArgsError> {
        let parse = |bus: &str| {
            BusConfig::parse(bus, &self.bus_prefix, self.bus_replicas)
                .and_then(|c| c.with_lease_ms(self.bus_lease_ms))
                .and_then(|c| c.with_max_age_ms(self.bus_max_age_ms))
                .and_then(|c| c.with_heartbeat_ms(self.bus_heartbeat_ms))
                .map_err(ArgsError::invalid)
                .and_then(|c| self.security.apply(c))
        };
        match (self.role, self.bus.as_deref()) {
            (Role::Standalone, None) if self.security.any() => Err(ArgsError::flag(
                "--bus-user, --bus-tls…",
                "need --role core or --role edge and --bus",
            )),
            (Role::Standalone, None) => Ok(None),
            (Role::Standalone, Some(_)) => Err(ArgsError::flag(
                "--bus",
                "needs --role core or --role edge (standalone has no bus)",
            )),
            (role, None) => Err(ArgsError::value(
                "--role",
                role_name(role),
                "needs --bus nats://host:port[,…]",
            )),
            (Role::Core, Some(bus)) => Ok(Some(BusRole::Core(parse(bus)?))),
            (Role::Edge, Some(bus)) => {
                if facts.feed_listen {
                    return Err(ArgsError::flag(
                        "--feed-listen",
                        "an edge runs no feeds (use it on a core)",
                    ));
                }
                if !facts.listens {
                    return Err(ArgsError::flag(
                        "--no-listen",
                        "an edge exists to serve subscribers",
                    ));
                }
                Ok(Some(BusRole::Edge(parse(bus)?)))
            }
        }
    }
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::Standalone => "standalone",
        Role::Core => "core",
        Role::Edge => "edge",
    }
}

/// Shapes a service to its role: a core publishes from one ring and has
/// no subscriber listener; an edge runs no feed (its FIX sessions and the
/// synthetic feed are not started).
pub fn fit_role(cfg: &mut crate::service::ServiceConfig) {
    match cfg.bus {
        Some(BusRole::Core(_)) => {
            cfg.gateway = None;
            cfg.pipeline.shards = 1;
        }
        Some(BusRole::Edge(_)) => {
            cfg.synthetic = None;
            cfg.sources.clear();
            cfg.ingest = None;
        }
        None => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bus: BusArgs,
    }

    /// The role, or the refusal as printed.
    fn role(flags: &[&str], facts: &RoleFacts) -> Result<Option<BusRole>, String> {
        let argv = std::iter::once("serve").chain(flags.iter().copied());
        let args = Cli::try_parse_from(argv).unwrap();
        args.bus.bus_role(facts).map_err(String::from)
    }

    const FACTS: RoleFacts = RoleFacts {
        listens: true,
        feed_listen: false,
    };

    #[test]
    fn standalone_is_the_default_and_takes_no_bus() {
        assert_eq!(role(&[], &FACTS), Ok(None));
        let e = role(&["--bus", "nats://h:1"], &FACTS).unwrap_err();
        assert!(e.contains("--bus") && e.contains("--role"), "{e}");
    }

    #[test]
    fn core_and_edge_need_a_valid_bus() {
        let e = role(&["--role", "core"], &FACTS).unwrap_err();
        assert!(e.contains("needs --bus"), "{e}");
        let e = role(&["--role", "edge", "--bus", "h:1"], &FACTS).unwrap_err();
        assert!(e.contains("nats://"), "{e}");
        let e = role(
            &[
                "--role",
                "core",
                "--bus",
                "nats://h:1",
                "--bus-lease-ms",
                "10",
            ],
            &FACTS,
        )
        .unwrap_err();
        assert!(e.contains("--bus-lease-ms"), "{e}");
        let e = role(
            &[
                "--role",
                "core",
                "--bus",
                "nats://h:1",
                "--bus-heartbeat-ms",
                "5",
            ],
            &FACTS,
        )
        .unwrap_err();
        assert!(e.contains("--bus-heartbeat-ms"), "{e}");
        let ok = role(
            &[
                "--role",
                "core",
                "--bus",
                "nats://h:1",
                "--bus-lease-ms",
                "1000",
            ],
            &FACTS,
        );
        let Ok(Some(BusRole::Core(c))) = ok else {
            panic!("{ok:?}")
        };
        assert_eq!((c.lease_ms, c.prefix.as_str()), (1000, "pricewire"));
        assert_eq!(c.heartbeat_ms, crate::bus::heartbeat::HEARTBEAT_MS_DEFAULT);
    }

    #[test]
    fn flags_that_do_not_fit_the_role_are_refused_by_name() {
        // A core runs under either threading (the role check does not
        // look at it): with `shared` its engine is hosted by the bus thread.
        let ok = role(&["--role", "core", "--bus", "nats://h:1"], &FACTS);
        assert!(matches!(ok, Ok(Some(BusRole::Core(_)))), "{ok:?}");
        let feeds = RoleFacts {
            feed_listen: true,
            ..FACTS
        };
        let e = role(&["--role", "edge", "--bus", "nats://h:1"], &feeds).unwrap_err();
        assert!(e.contains("--feed-listen"), "{e}");
        let headless = RoleFacts {
            listens: false,
            ..FACTS
        };
        let e = role(&["--role", "edge", "--bus", "nats://h:1"], &headless).unwrap_err();
        assert!(e.contains("--no-listen"), "{e}");
        let edge = role(&["--role", "edge", "--bus", "nats://h:1"], &FACTS);
        assert!(matches!(edge, Ok(Some(BusRole::Edge(_)))), "{edge:?}");
    }
}
