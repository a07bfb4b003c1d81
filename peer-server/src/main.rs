//! `peer-server`: see the library's documentation (`peer_server`).

use clap::Parser;

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = peer_server::Args::parse();
    let dirs = pcm_proto::UserDirs::from_env();
    let run = || -> anyhow::Result<()> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async {
            let server = peer_server::PeerServer::start(&args, &dirs).await?;
            println!("{}", server.startup_line());
            tokio::select! {
                r = server.task => r.map_err(anyhow::Error::from),
                r = tokio::signal::ctrl_c() => r.map_err(anyhow::Error::from),
            }
        })
    };
    if let Err(e) = run() {
        eprintln!("peer-server: {e:#}");
        std::process::exit(1);
    }
}
