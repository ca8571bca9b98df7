//! The log output of every command: human text by default, or one JSON
//! object per line (`--log-format json`) for a log pipeline.
//!
//! The JSON form is tracing-subscriber's JSON layer with the event's fields
//! flattened into the object, so a line's keys are stable and documented
//! (docs/operations.md § Logs): `timestamp` (RFC 3339, UTC), `level`,
//! `target` (the module), `threadName` (the stage's thread, e.g.
//! `pw-shard0`), `message`, the event's own fields by name, and — for an
//! event inside a span — `span` (the innermost span's name and fields) and
//! `spans` (every open span, outermost first). Text from outside (a peer's
//! bytes, a name a client sent) is escaped at the log site
//! (`runtime::esc`), and the JSON layer escapes again what JSON needs, so
//! one event is always one line.

use clap::ValueEnum;

/// `--log-format`: how log lines are written to stderr.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human text: time, level, message, fields.
    #[default]
    Text,
    /// One JSON object per line (keys in docs/operations.md § Logs).
    Json,
}

/// Installs the process's log subscriber on stderr, filtered by
/// `RUST_LOG` (default `info`). A second call does nothing.
pub fn init(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour only for a person: stderr a terminal and NO_COLOR unset.
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let colour = tty && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.with_target(false).try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(true)
            .with_thread_names(true)
            .with_target(true)
            .try_init(),
    };
}

#[cfg(test)]
mod tests {
    use super::LogFormat;
    use crate::cli::Cli;
    use clap::Parser;

    fn parsed(args: &[&str]) -> LogFormat {
        Cli::try_parse_from(args).unwrap().log_format
    }

    #[test]
    fn the_flag_is_global_and_defaults_to_text() {
        assert_eq!(parsed(&["pricewire", "serve"]), LogFormat::Text);
        assert_eq!(
            parsed(&["pricewire", "--log-format", "json", "serve"]),
            LogFormat::Json
        );
        // After the subcommand, as `[serve] log-format` is appended.
        assert_eq!(
            parsed(&["pricewire", "serve", "--log-format", "json"]),
            LogFormat::Json
        );
        assert!(Cli::try_parse_from(["pricewire", "serve", "--log-format", "xml"]).is_err());
    }

    #[test]
    fn the_config_files_serve_table_can_pick_json() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pw.toml");
        std::fs::write(&path, "[serve]\nlog-format = \"json\"\n").unwrap();
        let argv = ["pricewire", "serve", "--config", path.to_str().unwrap()];
        let merged = crate::cli::config_flags::merge(argv.iter().map(Into::into).collect());
        let cli = Cli::try_parse_from(merged.unwrap()).unwrap();
        assert_eq!(cli.log_format, LogFormat::Json);
    }
}
