//! The log, for people: PCM's `tracing` lines to standard error, once the application asks.

/// Logs to stderr, filtered by `RUST_LOG` (default `warn,pcm=info`), unless the
/// application installed its own subscriber. PCM installs no subscriber by itself: call it
/// before [`Pcm::init`](crate::Pcm::init) to see PCM's log lines (for people; programs read the events,
/// [`events`](crate::events)), or install your own. The C interface calls it in
/// `PCM_Init` and before logging errors of calls made before `PCM_Init`.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,pcm=info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}
