//! `seckill-app`: the flash-sale order service. `seckill-app --help` lists every setting; each
//! also reads an environment variable. `seckill-app buyer-token --user <id>` prints a buyer
//! token, for trying the service by hand.

use std::time::{Duration, SystemTime};

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// mimalloc rather than glibc's allocator: hyper allocates for every request (its buffers, the
/// answer's headers and body), and in a profile of a sold-out product's refusals glibc's
/// `malloc` and `free` took about a tenth of the service's CPU.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The flash-sale order service: sells a product's stock through a strategy chosen per request.
#[derive(Parser)]
#[command(
    name = "seckill-app",
    version,
    about,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(flatten)]
    config: app::Config,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Prints a buyer token of `--user`, signed with the buyer key, as a sign-in service would
    /// hand one out: `curl -H "authorization: Bearer $(seckill-app buyer-token --user alice)"`
    /// then buys, and reads, pays or cancels the orders, as alice.
    BuyerToken(BuyerToken),
}

#[derive(Args)]
struct BuyerToken {
    /// The buyer (user id) the token names: 1 to 64 characters, no white space at either end.
    #[arg(long)]
    user: String,

    /// How long the token is good for, in seconds.
    #[arg(long, default_value_t = 3600, value_parser = clap::value_parser!(u64).range(1..))]
    ttl_secs: u64,

    /// The key of the instances the token is for (their `--buyer-key`).
    #[arg(long, env = "SECKILL_BUYER_KEY", hide_env_values = true)]
    buyer_key: String,
}

impl BuyerToken {
    fn mint(&self) -> anyhow::Result<String> {
        let user = &self.user;
        let within_rules = !user.is_empty()
            && user.chars().count() <= app::api::MAX_USER_ID
            && user.trim() == user;
        anyhow::ensure!(
            within_rules,
            "a user id is 1 to {} characters without white space at either end: {user:?}",
            app::api::MAX_USER_ID
        );
        let key = app::buyer::BuyerKey::new(self.buyer_key.as_bytes());
        Ok(key.sign(user, SystemTime::now() + Duration::from_secs(self.ttl_secs)))
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let Cli { config, command } = Cli::parse();
    if let Some(Command::BuyerToken(token)) = command {
        println!("{}", token.mint()?);
        return Ok(());
    }
    let log = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::registry()
        .with(tracing_subscriber::fmt::layer().with_filter(log))
        .with(app::strategy::under_lock::layer())
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
