//! `seckill-app`: the flash-sale order service. `seckill-app --help` lists every setting; each
//! also reads an environment variable.

use anyhow::Context;
use clap::Parser;
use tracing_subscriber::EnvFilter;

/// mimalloc rather than glibc's allocator: hyper allocates for every request (its buffers, the
/// answer's headers and body), and in a profile of a sold-out product's refusals glibc's
/// `malloc` and `free` took about a tenth of the service's CPU.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = app::Config::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .init();
    let bind = |address| async move {
        tokio::net::TcpListener::bind(address)
            .await
            .with_context(|| format!("cannot listen on {address}"))
    };
    let public = bind(config.listen).await?;
    let metrics = match config.metrics_listen {
        Some(address) => Some(bind(address).await?),
        None => None,
    };
    app::serve(config, app::Listeners { public, metrics }).await?;
    Ok(())
}
