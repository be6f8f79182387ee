//! A real browser, driven as a person would use it: headless Chromium through chromedriver,
//! over WebDriver with the `fantoccini` client. The tests open the live page and
//! `report.html` in it; `seckill-bench run --screenshots` saves what it shows ([`screenshots`]).
//!
//! Debian's `chromium` and `chromium-driver` packages provide the two programs (`cargo xtask
//! setup` installs them). [`Browser::require`] tells a test whether it may skip: only when
//! the programs are missing and `SECKILL_REQUIRE_BROWSER` is unset (`cargo xtask test` sets it,
//! so CI never skips).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, ChildStdout, Command};

/// Set (to anything but `0`) to make a missing browser a failure instead of a skip.
pub const REQUIRE: &str = "SECKILL_REQUIRE_BROWSER";

/// The two programs, as Debian names them (found on `PATH`; `SECKILL_CHROMIUM` and
/// `SECKILL_CHROMEDRIVER` name others).
const CHROMIUM: &str = "chromium";
const CHROMEDRIVER: &str = "chromedriver";

/// A headless Chromium session and the chromedriver serving it; [`Browser::close`] ends both
/// (dropping it kills chromedriver, which ends its browser).
pub struct Browser {
    client: Client,
    driver: Child,
}

/// What a page logged to its console, as chromedriver reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsoleEntry {
    pub level: String,
    pub message: String,
}

impl Browser {
    /// The programs, or why there is no browser here.
    pub fn programs() -> std::result::Result<(PathBuf, PathBuf), String> {
        let find = |env: &str, name: &str| {
            if let Some(path) = std::env::var_os(env) {
                return Some(PathBuf::from(path));
            }
            std::env::split_paths(&std::env::var_os("PATH")?)
                .map(|dir| dir.join(name))
                .find(|p| p.is_file())
        };
        let missing = |name: &str| {
            format!(
                "{name} is not installed (Debian: apt-get install chromium chromium-driver, or \
                 cargo xtask setup)"
            )
        };
        Ok((
            find("SECKILL_CHROMIUM", CHROMIUM).ok_or_else(|| missing(CHROMIUM))?,
            find("SECKILL_CHROMEDRIVER", CHROMEDRIVER).ok_or_else(|| missing(CHROMEDRIVER))?,
        ))
    }

    /// Whether the browser tests must run: `Ok(true)` to run, `Ok(false)` to skip (the reason
    /// printed), `Err` when the browser is missing but required.
    pub fn require() -> Result<bool> {
        match Browser::programs() {
            Ok(_) => Ok(true),
            Err(why) if std::env::var(REQUIRE).is_ok_and(|v| !v.is_empty() && v != "0") => {
                bail!("{REQUIRE} is set, but {why}")
            }
            Err(why) => {
                eprintln!("skipped: {why}; set {REQUIRE}=1 to make this a failure");
                Ok(false)
            }
        }
    }

    /// Starts chromedriver on a free loopback port (waiting for it to say so) and a headless
    /// Chromium session of `width` × `height`, its console logged.
    pub async fn start(width: u32, height: u32) -> Result<Browser> {
        let (chromium, driver) = Browser::programs().map_err(anyhow::Error::msg)?;
        let (driver, mut lines, port) = match Browser::driver(&driver).await {
            Ok(started) => started,
            // One that exits before it listens is started once more, as a person would; what
            // the first one wrote is printed.
            Err(first) => {
                eprintln!("chromedriver did not start, starting it again: {first:#}");
                Browser::driver(&driver).await?
            }
        };
        // Keep reading, so that chromedriver never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let capabilities = json!({
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--no-first-run", "--disable-extensions", "--hide-scrollbars",
                    format!("--window-size={width},{height}"),
                ],
            },
            "goog:loggingPrefs": { "browser": "ALL" },
        });
        let Value::Object(capabilities) = capabilities else {
            unreachable!("an object")
        };
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = ClientBuilder::new(connector)
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .context("opening a Chromium session")?;
        Ok(Browser { client, driver })
    }

    /// Starts chromedriver and waits for the port it listens on; when it exits first, the
    /// error says what it wrote and how it exited.
    async fn driver(
        program: &Path,
    ) -> Result<(Child, tokio::io::Lines<BufReader<ChildStdout>>, u16)> {
        let mut driver = Command::new(program)
            .args(["--port=0", "--log-level=WARNING"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("starting chromedriver")?;
        let stdout = driver.stdout.take().context("chromedriver's output")?;
        let mut lines = BufReader::new(stdout).lines();
        let mut said = Vec::new();
        loop {
            let Some(line) = lines.next_line().await? else {
                let mut errors = String::new();
                if let Some(mut stderr) = driver.stderr.take() {
                    let _ = stderr.read_to_string(&mut errors).await;
                }
                let status = driver.wait().await?;
                bail!(
                    "chromedriver exited before it listened ({status}); it wrote {:?} and on \
                     its error output {:?}",
                    said.join("\n"),
                    errors.trim()
                );
            };
            if let Some(rest) = line.split("started successfully on port ").nth(1) {
                let port = rest.trim_end_matches('.').trim().parse::<u16>()?;
                // Its error output drained too, so that it never blocks on a full pipe.
                if let Some(mut stderr) = driver.stderr.take() {
                    tokio::spawn(async move {
                        let _ = tokio::io::copy(&mut stderr, &mut tokio::io::sink()).await;
                    });
                }
                return Ok((driver, lines, port));
            }
            said.push(line);
        }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// What the pages logged to the console since the last call.
    pub async fn console(&self) -> Result<Vec<ConsoleEntry>> {
        let entries = self.client.issue_cmd(BrowserLog).await?;
        Ok(entries
            .as_array()
            .map(|list| {
                list.iter()
                    .map(|e| ConsoleEntry {
                        level: e["level"].as_str().unwrap_or_default().to_string(),
                        message: e["message"].as_str().unwrap_or_default().to_string(),
                    })
                    .collect()
            })
            .unwrap_or_default())
    }

    /// The URLs of every resource the page requested after its document (the performance
    /// timeline's `resource` entries).
    pub async fn requests(&self) -> Result<Vec<String>> {
        let urls = self
            .client
            .execute(
                "return performance.getEntriesByType('resource').map(function (e) { return e.name; });",
                Vec::new(),
            )
            .await?;
        Ok(serde_json::from_value(urls)?)
    }

    /// Saves the top of the page as a PNG.
    pub async fn screenshot(&self, path: &Path) -> Result<()> {
        self.client
            .execute("window.scrollTo(0, 0);", Vec::new())
            .await?;
        let png = self.client.screenshot().await?;
        std::fs::write(path, png).with_context(|| format!("writing {}", path.display()))
    }

    /// Ends the session and chromedriver.
    pub async fn close(mut self) -> Result<()> {
        self.client.close().await?;
        let _ = self.driver.kill().await;
        Ok(())
    }
}

/// Longest wait for a page's state before giving up: a bound for a broken page, far above
/// what a page takes to load or replay a run.
pub const PATIENCE: Duration = Duration::from_secs(120);

/// Saves what a person would see into the run's directory `dir`: `live.png`, the live page at
/// `live_url` once it shows the run finished (a page that opens late is sent the whole run
/// again), and `report.png`, the top of the run's `report.html`.
pub async fn screenshots(live_url: &str, dir: &Path) -> Result<Vec<PathBuf>> {
    let browser = Browser::start(1280, 1600).await?;
    let client = browser.client();
    client.goto(live_url).await?;
    client
        .wait()
        .at_most(PATIENCE)
        .for_element(Locator::Css("#status[data-state='finished']"))
        .await
        .context("the live page never showed the run finished")?;
    let (live, report) = (dir.join("live.png"), dir.join("report.png"));
    browser.screenshot(&live).await?;
    client.goto(&file_url(&dir.join("report.html"))?).await?;
    client
        .wait()
        .at_most(PATIENCE)
        .for_element(Locator::Id("summary"))
        .await?;
    browser.screenshot(&report).await?;
    browser.close().await?;
    Ok(vec![live, report])
}

/// The `file://` URL of a local file.
pub fn file_url(path: &Path) -> Result<String> {
    let absolute = std::path::absolute(path)?;
    Ok(url::Url::from_file_path(&absolute)
        .map_err(|()| anyhow::anyhow!("{} is not a file path", absolute.display()))?
        .to_string())
}

/// chromedriver's `POST /session/{id}/se/log` for the `browser` log: the console.
#[derive(Debug)]
struct BrowserLog;

impl WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(
        &self,
        base_url: &url::Url,
        session_id: Option<&str>,
    ) -> std::result::Result<url::Url, url::ParseError> {
        base_url.join(&format!(
            "session/{}/se/log",
            session_id.unwrap_or_default()
        ))
    }

    fn method_and_body(&self, _: &url::Url) -> (axum::http::Method, Option<String>) {
        (
            axum::http::Method::POST,
            Some(json!({ "type": "browser" }).to_string()),
        )
    }
}

#[cfg(test)]
mod tests {
    use maud::html;

    use super::*;
    use crate::report::charts;

    /// Console entries at error level.
    fn errors(console: &[ConsoleEntry]) -> Vec<&ConsoleEntry> {
        console.iter().filter(|e| e.level == "SEVERE").collect()
    }

    async fn order(browser: &Browser) -> Vec<String> {
        let rows = browser
            .client()
            .execute(
                "return Array.prototype.map.call(document.querySelectorAll('#summary tbody tr'), \
                 function (r) { return r.getAttribute('data-strategy'); });",
                Vec::new(),
            )
            .await
            .unwrap();
        serde_json::from_value(rows).unwrap()
    }

    #[tokio::test]
    async fn report_html_opens_from_a_file_with_no_console_error_no_request_and_sorts() {
        if !Browser::require().unwrap() {
            return;
        }
        let mut r = crate::sample::report();
        r.strategies[0]
            .loops
            .as_mut()
            .unwrap()
            .throughput
            .closed
            .successes_per_sec = 900.0;
        let dir = tempfile::tempdir().unwrap();
        let page = crate::document::html(&r, &charts::all(&r).unwrap(), None);
        std::fs::write(dir.path().join("report.html"), page).unwrap();
        let browser = Browser::start(1280, 900).await.unwrap();
        let client = browser.client();
        client
            .goto(&file_url(&dir.path().join("report.html")).unwrap())
            .await
            .unwrap();
        let console = browser.console().await.unwrap();
        assert!(errors(&console).is_empty(), "{console:?}");
        assert_eq!(browser.requests().await.unwrap(), Vec::<String>::new());
        assert_eq!(order(&browser).await, ["naive", "conditional"]);
        let header = client
            .find(fantoccini::Locator::XPath(
                "//table[@id='summary']//th[text()='deductions/s (closed)']",
            ))
            .await
            .unwrap();
        header.click().await.unwrap();
        assert_eq!(order(&browser).await, ["conditional", "naive"], "ascending");
        header.click().await.unwrap();
        assert_eq!(
            order(&browser).await,
            ["naive", "conditional"],
            "descending"
        );
        assert!(errors(&browser.console().await.unwrap()).is_empty());
        browser.close().await.unwrap();
    }

    #[tokio::test]
    async fn a_page_that_reaches_outside_is_refused_and_the_refusal_is_seen() {
        if !Browser::require().unwrap() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let body = html! { img src="http://127.0.0.1:9/outside.png" alt="outside"; };
        let page = crate::report::html::page::document("outside", body, &[], None).into_string();
        std::fs::write(dir.path().join("outside.html"), page).unwrap();
        let browser = Browser::start(800, 600).await.unwrap();
        browser
            .client()
            .goto(&file_url(&dir.path().join("outside.html")).unwrap())
            .await
            .unwrap();
        let console = browser.console().await.unwrap();
        let refused = errors(&console);
        assert!(
            refused
                .iter()
                .any(|e| e.message.contains("Content Security Policy")),
            "{console:?}"
        );
        browser.close().await.unwrap();
    }
}
