//! `serve --help` grouped by concern, with a short and a long form.
//!
//! The flags are defined where they are read (`serve/args.rs`,
//! `gateway_args.rs`, `auth_args.rs`, `bus_args.rs`, `ops::OpsArgs`); this
//! module only arranges them for the reader: [`GROUPS`] puts every `serve`
//! flag under one heading (clap's `help_heading`), and each flag's `-h`
//! line is the first sentence of its doc text (a summary that fits
//! [`SHORT_MAX`]) while `--help` keeps all of it. A flag no group names
//! lands under [`UNGROUPED`], which a test keeps empty, so a new flag must
//! be given its place here.

use clap::{Arg, Command, CommandFactory, FromArgMatches};

use super::Cli;

/// The heading of a `serve` flag no group names (kept empty by a test).
pub const UNGROUPED: &str = "Ungrouped";

/// `serve` flags by concern, in the order `serve --help` shows them.
#[rustfmt::skip]
pub const GROUPS: &[(&str, &[&str])] = &[
    ("Ops and lifecycle", &[
        "config", "log-format", "ops-listen", "report-interval-ms", "duration-s",
        "drain-delay-ms", "grace-ms", "stage-exit-grace-ms", "stagger-step-ms",
        "stagger-cap-ms", "stagger-jitter-ms", "ordinal", "pod-name",
    ]),
    ("Feeds and engine", &[
        "providers", "synthetic-rate", "no-synthetic", "seed", "feed-listen",
        "feed-full-wait-us", "max-quote-age-ms", "spike-bps", "history-depth",
    ]),
    ("Subscriber listener", &[
        "listen", "no-listen", "listen-backlog", "proxy-protocol", "proxy-from",
        "proxy-header-timeout-ms", "proxy-pending-max", "heartbeat-ms",
        "dead-after-heartbeats", "logon-timeout-ms", "frame-timeout-ms", "max-frame-bytes",
        "max-connections-per-shard", "max-subscriptions", "max-update-hz",
    ]),
    ("Threads and shards", &[
        "threading", "shards", "shard0-fill", "shard0-spill-pct", "shard0-drain-busy-pct",
        "shard0-drain-request-share-pct", "shard0-drain-min-requests", "shard0-drain-abort-ms",
        "feed-ring", "shard-ring", "feed-wait", "engine-wait", "shard-wait", "cpus",
        "rt-priority", "request-workers",
    ]),
    ("Overload: requests and buffers", &[
        "queue-capacity", "queue-target-ms", "queue-interval-ms", "shed-retry-min-ms",
        "shed-retry-max-ms", "account-request-rate-per-s", "account-request-burst",
        "low-water-bytes", "high-water-bytes", "out-cap-bytes", "slow-consumer-ms",
        "sndbuf-bytes", "price-age-max-ms", "merge-after-us", "loop-lag-target-ms",
    ]),
    ("Overload: admission and rate limits", &[
        "accept-rate-per-s", "accept-burst", "ip-connections-max", "ip-connect-burst",
        "ip-connect-rate-per-s", "busy-retry-min-ms", "busy-retry-max-ms", "logon-rate-per-s",
        "first-subscribe-rate-per-s", "symbol-list-rate-per-s", "msg-rate-per-s", "msg-burst",
        "flood-disconnect-after",
        "fd-reserve",
    ]),
    ("Security: TLS and tokens", &[
        "tls-cert", "tls-key", "tls-handshake-timeout-ms", "tls-busy-handshakes-per-s",
        "feed-tls-client-ca", "feed-plaintext", "ingest-token", "ingest-token-file",
        "redis", "redis-password-file", "bad-frame-limit", "bad-frame-window-ms",
    ]),
    ("Security: logon limits", &[
        "lockout-failures", "lockout-account-failures", "lockout-window-ms",
        "lockout-first-ms", "lockout-max-ms", "lockout-forget-ms", "lockout-addresses",
        "lockout-accounts", "verifier-threads", "verifier-queue", "feed-verifier-queue",
        "argon2-max-memory-kib", "argon2-max-time", "argon2-max-parallelism",
    ]),
    ("Bus (cores and edges)", &[
        "role", "bus", "bus-prefix", "bus-replicas", "bus-lease-ms", "bus-max-age-ms",
        "bus-heartbeat-ms", "bus-tls", "bus-tls-ca", "bus-tls-cert", "bus-tls-key",
        "bus-user", "bus-password-file", "bus-token-file", "bus-nkey-file", "bus-creds-file",
    ]),
    ("Recording", &[
        "record", "record-ring", "record-flush-ms", "record-fsync", "record-segment-mib",
    ]),
];

/// The command line as the binary parses it: [`Cli`] with `serve`'s flags
/// grouped and its `-h` lines shortened.
pub fn command() -> Command {
    // `--log-format` is global: placed once, it reaches `serve` when built.
    Cli::command()
        .mut_arg("log_format", place)
        .mut_subcommand("serve", arrange)
}

/// Parses `args` with [`command`]; exits with clap's message (and code 2)
/// on a usage error, as `Cli::parse_from` does.
pub fn parse_from(args: Vec<std::ffi::OsString>) -> Cli {
    let matches = command().get_matches_from(args);
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// `serve` again with its flags placed and in group order: clap lists
/// headings in the order their first flag was added, so the flags are
/// added anew, sorted. What the derive set on `serve` itself (name, about,
/// negative numbers, the struct's arg groups) is carried over; a test
/// compares the two commands.
fn arrange(serve: Command) -> Command {
    let mut args: Vec<Arg> = serve.get_arguments().cloned().map(place).collect();
    args.sort_by_key(Arg::get_display_order);
    let mut fresh = Command::new("serve")
        .allow_negative_numbers(serve.is_allow_negative_numbers_set())
        .groups(serve.get_groups().cloned())
        .args(args);
    if let Some(about) = serve.get_about() {
        fresh = fresh.about(about.clone());
    }
    if let Some(about) = serve.get_long_about() {
        fresh = fresh.long_about(about.clone());
    }
    fresh
}

/// Puts one flag under its group's heading, in the group's order, with
/// its first sentence for `-h` and its whole text for `--help`.
fn place(arg: Arg) -> Arg {
    let Some(long) = arg.get_long().map(str::to_string) else {
        return arg;
    };
    if long == "help" {
        return arg;
    }
    let found = GROUPS.iter().enumerate().find_map(|(g, (heading, flags))| {
        let i = flags.iter().position(|f| *f == long)?;
        Some((*heading, g * 100 + i))
    });
    let (heading, order) = found.unwrap_or((UNGROUPED, GROUPS.len() * 100));
    let full = arg
        .get_long_help()
        .or(arg.get_help())
        .map(|h| h.to_string());
    let arg = arg.help_heading(heading).display_order(order);
    match full {
        Some(full) => arg.help(first_sentence(&full)).long_help(full),
        None => arg,
    }
}

/// Longest `-h` text: every flag's first sentence fits (a test checks),
/// so no `-h` line is cut and each reads on its own.
pub const SHORT_MAX: usize = 72;

/// The `-h` text: the first sentence (up to a `.` before a space and a
/// capital or a backtick, or the end), without its full stop.
pub fn first_sentence(text: &str) -> String {
    let b = text.as_bytes();
    let (mut i, mut end) = (0, text.trim_end_matches('.').len());
    while let Some(j) = text[i..].find(". ").map(|j| i + j) {
        let next = b.get(j + 2).copied().unwrap_or(b'A');
        let abbrev = text[..j].ends_with("e.g") || text[..j].ends_with("i.e");
        if !abbrev && (next.is_ascii_uppercase() || next == b'`') {
            end = j;
            break;
        }
        i = j + 2;
    }
    text[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serve() -> Command {
        let mut c = command();
        c.build();
        c.find_subcommand("serve").unwrap().clone()
    }

    #[test]
    fn the_arranged_serve_is_the_derived_one_but_for_help() {
        let mut derived = Cli::command();
        derived.build();
        let derived = derived.find_subcommand("serve").unwrap().clone();
        let mut cmd = command();
        cmd.build();
        let arranged = cmd.find_subcommand("serve").unwrap();
        assert_eq!(arranged.get_about(), derived.get_about());
        assert_eq!(arranged.get_long_about(), derived.get_long_about());
        assert!(arranged.is_allow_negative_numbers_set());
        let groups =
            |c: &Command| -> Vec<String> { c.get_groups().map(|g| format!("{g:?}")).collect() };
        assert_eq!(groups(arranged), groups(&derived));
        // Every flag carries over with everything but its help and place.
        for d in derived.get_arguments() {
            let a = arranged.get_arguments().find(|a| a.get_id() == d.get_id());
            let a = a.unwrap_or_else(|| panic!("{} lost", d.get_id()));
            let strip = |x: &Arg| {
                let x = x.clone().help(None::<&str>).long_help(None::<&str>);
                format!("{:?}", x.help_heading(None::<&str>).display_order(0))
            };
            assert_eq!(strip(a), strip(d));
        }
        cmd.debug_assert();
    }

    #[test]
    fn every_serve_flag_is_in_exactly_one_group() {
        let serve = serve();
        let longs: Vec<&str> = serve.get_arguments().filter_map(Arg::get_long).collect();
        for long in longs.iter().filter(|l| **l != "help") {
            let n = GROUPS.iter().filter(|(_, f)| f.contains(long)).count();
            assert_eq!(n, 1, "--{long} is in {n} groups of src/cli/help.rs");
        }
        for (heading, flags) in GROUPS {
            for f in *flags {
                assert!(longs.contains(f), "{heading}: no flag --{f}");
            }
        }
        let ungrouped = serve
            .get_arguments()
            .filter(|a| a.get_help_heading() == Some(UNGROUPED));
        assert_eq!(ungrouped.count(), 0);
    }

    #[test]
    fn short_help_is_a_first_sentence_and_long_help_keeps_the_whole() {
        let serve = serve();
        for a in serve
            .get_arguments()
            .filter(|a| a.get_long() != Some("help"))
        {
            let (short, long) = (a.get_help().unwrap().to_string(), a.get_long_help());
            let long = long.map(|l| l.to_string()).unwrap_or_default();
            assert!(
                long.starts_with(&short),
                "--{}: {short:?}",
                a.get_long().unwrap()
            );
        }
        assert_eq!(first_sentence("Shards. Default: 1."), "Shards");
        assert_eq!(
            first_sentence("Pins, e.g. `a=1`. More."),
            "Pins, e.g. `a=1`"
        );
        assert_eq!(first_sentence("Rate (0 = off)."), "Rate (0 = off)");
        assert_eq!(first_sentence("With --x. `--y` too."), "With --x");
        assert_eq!(
            first_sentence("Rate. 1..=9; 0 is refused."),
            "Rate. 1..=9; 0 is refused"
        );
    }

    /// Every `serve` flag's `-h` line is its whole first sentence: a
    /// summary that fits [`SHORT_MAX`], so nothing is cut and no line
    /// depends on the flag before it.
    #[test]
    fn every_first_sentence_fits_the_short_help() {
        let serve = serve();
        let long: Vec<String> = serve
            .get_arguments()
            .filter(|a| a.get_long() != Some("help"))
            .filter_map(|a| {
                let text = a.get_long_help().or(a.get_help())?.to_string();
                let short = first_sentence(&text);
                let n = short.chars().count();
                (n > SHORT_MAX).then(|| format!("--{} ({n}): {short}", a.get_long().unwrap()))
            })
            .collect();
        assert!(
            long.is_empty(),
            "first sentences longer than SHORT_MAX ({SHORT_MAX}), to be shortened in the \
             flag's doc text:\n{}",
            long.join("\n")
        );
    }

    /// `serve -h`'s lines under each heading.
    fn blocks(help: &str) -> Vec<(String, usize)> {
        let mut out: Vec<(String, usize)> = Vec::new();
        for line in help.lines() {
            if !line.starts_with(' ') && line.ends_with(':') {
                out.push((line.to_string(), 0));
            } else if let Some(last) = out.last_mut().filter(|_| line.starts_with("  ")) {
                last.1 += 1;
            }
        }
        out
    }

    #[test]
    fn every_group_of_the_short_help_fits_a_screen() {
        let mut cmd = command();
        cmd.build();
        let help = cmd
            .find_subcommand_mut("serve")
            .unwrap()
            .render_help()
            .to_string();
        let blocks = blocks(&help);
        let headings: Vec<&str> = blocks
            .iter()
            .map(|(h, _)| h.trim_end_matches(':'))
            .collect();
        let want: Vec<&str> = GROUPS.iter().map(|(h, _)| *h).collect();
        assert_eq!(
            &headings[1..],
            &want[..],
            "Options (help) first, then the groups"
        );
        for (heading, lines) in &blocks {
            assert!(*lines <= 40, "{heading} takes {lines} lines:\n{help}");
        }
    }
}
