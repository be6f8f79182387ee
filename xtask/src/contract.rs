//! The contract test: schemathesis generates requests from the app's OpenAPI document
//! (`GET /api/openapi.json`) and checks every answer against it — status codes, bodies,
//! headers, and that the server accepts every schema-valid input and refuses invalid ones. A
//! difference between the document and what the server enforces fails `cargo xtask test`.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};

/// Generated requests per operation and phase: enough to hit every boundary the document
/// declares (about 2,500 requests), few enough that the run takes about a minute.
const MAX_EXAMPLES: &str = "250";
/// Fixed, so a failure found once is found again on the next run.
const SEED: &str = "7";
/// The admin token the app is started with; schemathesis presents it on the admin routes, and
/// its `ignored_auth` check makes sure requests without it are refused.
const ADMIN_TOKEN: &str = "contract-test-token";
/// The buyer key the app is started with. Schemathesis presents a token of [`BUYER`] signed
/// with it on the buyer routes, as a signed-in buyer's client would (`ignored_auth` again makes
/// sure requests without one are refused).
const BUYER_KEY: &str = "contract-test-buyer-key";
/// The buyer schemathesis buys, reads, pays and cancels as.
const BUYER: &str = "contract-buyer";

/// Where schemathesis writes its progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// To the terminal, as it goes.
    Live,
    /// To `schemathesis.log` beside the app's log; its summary (all of it on a failure) is
    /// printed at the end. For a contract test that runs beside the test suite.
    Quiet,
}

/// Starts the debug `seckill-app` of `target` against `endpoints` (in a database of its own,
/// left behind like the tests' ones: the shared servers are throwaway) and runs schemathesis
/// `st` over every operation with every check.
pub fn run(st: &Path, target: &Path, endpoints: &sandbox::Endpoints, output: Output) -> Result<()> {
    let work = target.join("contract");
    std::fs::create_dir_all(&work)?;
    let run_id = format!(
        "contract_{}_{}",
        std::process::id(),
        SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis()
    );
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()?));
    let log_path = work.join("app.log");
    let log = std::fs::File::create(&log_path)?;
    let binary = target.join("debug").join("seckill-app");
    let config = auth_config(&binary, &work)?;
    let mut app = Command::new(&binary);
    endpoints.apply(&mut app);
    app.env(
        "DATABASE_URL",
        format!("{}/{run_id}", endpoints.database_url.trim_end_matches('/')),
    )
    .env("SECKILL_LISTEN", addr.to_string())
    .env("SECKILL_ADMIN_TOKEN", ADMIN_TOKEN)
    .env("SECKILL_BUYER_KEY", BUYER_KEY)
    .env("SECKILL_LOCK_PREFIX", format!("{run_id}:"))
    .env("RUST_LOG", "warn")
    .stdin(Stdio::null())
    .stdout(log.try_clone()?)
    .stderr(log);
    println!(
        "xtask: contract: starting seckill-app on {addr} (log: {})",
        log_path.display()
    );
    let mut app = App(app.spawn().context("starting target/debug/seckill-app")?);
    let outcome = app
        .wait_healthy(addr, Duration::from_secs(60))
        .and_then(|()| schemathesis(st, &work, &config, addr, output));
    drop(app);
    outcome.with_context(|| format!("the app's log is {}", log_path.display()))
}

/// Writes schemathesis's configuration of credentials into `work`, one per security scheme of
/// the document: the admin token, and a buyer token of [`BUYER`] minted by the app's own
/// `buyer-token` command. Its path.
fn auth_config(binary: &Path, work: &Path) -> Result<PathBuf> {
    let minted = Command::new(binary)
        .args(["buyer-token", "--user", BUYER, "--ttl-secs", "86400"])
        .env("SECKILL_BUYER_KEY", BUYER_KEY)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {} buyer-token", binary.display()))?;
    if !minted.status.success() {
        bail!(
            "seckill-app buyer-token failed ({}): {}",
            minted.status,
            String::from_utf8_lossy(&minted.stderr)
        );
    }
    let token = String::from_utf8(minted.stdout).context("a buyer token is text")?;
    let path = work.join("schemathesis.toml");
    std::fs::write(
        &path,
        format!(
            "[auth.openapi.admin_token]\nbearer = \"{ADMIN_TOKEN}\"\n\n\
             [auth.openapi.buyer_token]\nbearer = \"{}\"\n",
            token.trim()
        ),
    )?;
    Ok(path)
}

fn schemathesis(
    st: &Path,
    work: &Path,
    config: &Path,
    addr: SocketAddr,
    output: Output,
) -> Result<()> {
    let mut c = Command::new(st);
    // Every operation the server has is tested, the admin ones and the buyer ones included
    // (each with the token of its security scheme, from `config`), in every phase (the
    // examples phase finds no examples in the document and skips itself).
    // Untested: the `X-Seckill-Hold-Ms` header. The app runs without `--allow-fault-injection`,
    // so its document does not list the header; with it, generated pauses of up to two minutes
    // per request would make the run last hours. One worker: schemathesis 4.32.5 on Python 3.11
    // occasionally fails with an internal error ("AST constructor recursion depth mismatch")
    // when several workers generate at once.
    c.arg("--config-file")
        .arg(config)
        .arg("run")
        .arg(format!("http://{addr}/api/openapi.json"))
        .args(["--checks", "all"])
        .args(["--max-examples", MAX_EXAMPLES])
        .args(["--seed", SEED])
        .args(["--generation-database", "none"])
        .args(["--request-timeout", "10"])
        .args(["--workers", "1"])
        .arg("--no-color")
        .current_dir(work);
    let log_path = work.join("schemathesis.log");
    if output == Output::Quiet {
        let log = std::fs::File::create(&log_path)?;
        c.stdout(log.try_clone()?).stderr(log);
    }
    let started = Instant::now();
    println!("xtask: running {c:?}");
    let status = c
        .status()
        .with_context(|| format!("running {}", st.display()))?;
    if output == Output::Quiet {
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        println!(
            "xtask: contract: schemathesis's output ({}):",
            log_path.display()
        );
        print!("{}", summary(&log, status.success()));
    }
    println!(
        "xtask: contract: schemathesis took {:.0} s",
        started.elapsed().as_secs_f64()
    );
    if !status.success() {
        bail!("schemathesis found answers that contradict the OpenAPI document ({status})");
    }
    Ok(())
}

/// What to print of schemathesis's output: its `SUMMARY` section (operations, phases,
/// warnings, test cases) when it passed, all of it when it failed.
fn summary(log: &str, passed: bool) -> &str {
    if !passed {
        return log;
    }
    log.rfind("SUMMARY").map_or(log, |at| {
        let line_start = log[..at].rfind('\n').map_or(0, |n| n + 1);
        &log[line_start..]
    })
}

/// The app process; killed when dropped, so a failed run leaves nothing behind.
struct App(Child);

impl App {
    fn wait_healthy(&mut self, addr: SocketAddr, within: Duration) -> Result<()> {
        let deadline = Instant::now() + within;
        loop {
            if healthz(addr).is_ok_and(|ok| ok) {
                return Ok(());
            }
            if let Some(status) = self.0.try_wait()? {
                bail!("seckill-app exited with {status} before it was healthy");
            }
            if Instant::now() > deadline {
                bail!("seckill-app did not answer GET /healthz with 200 within {within:?}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for App {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether `GET /healthz` answers 200; a readiness probe, so the status line is all it reads.
fn healthz(addr: SocketAddr) -> std::io::Result<bool> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head)?;
    Ok(head.starts_with(b"HTTP/1.1 200"))
}

/// A loopback port nobody listens on right now.
fn free_port() -> Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}
