//! `cargo xtask setup`: make sure every server program (and the browser the page tests drive)
//! is installed, and in a Python venv of
//! the project's own: schemathesis (the OpenAPI contract tester `cargo xtask test` runs) and
//! the Python lock libraries `seckill-bench lock peers` measures ours against.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Something the project needs on the machine, how to tell it is there, and which package
/// provides it.
struct Requirement {
    what: &'static str,
    present: fn() -> bool,
    debian: &'static str,
    brew: &'static str,
}

const REQUIREMENTS: &[Requirement] = &[
    Requirement {
        what: "MariaDB server (mariadbd, mariadb-install-db)",
        present: || on_path("mariadbd") && on_path("mariadb-install-db"),
        debian: "mariadb-server",
        brew: "mariadb",
    },
    Requirement {
        what: "PostgreSQL 15 (initdb, postgres, pgbench)",
        present: || {
            let packaged = Path::new("/usr/lib/postgresql/15/bin");
            ["initdb", "postgres", "pgbench"]
                .iter()
                .all(|p| packaged.join(p).is_file() || on_path(p))
        },
        debian: "postgresql-15",
        brew: "postgresql@15",
    },
    Requirement {
        what: "Galera (the provider of a multi-primary MariaDB cluster)",
        present: || Path::new("/usr/lib/galera/libgalera_smm.so").exists(),
        debian: "galera-4",
        brew: "galera",
    },
    Requirement {
        what: "rsync (a Galera node joins by an rsync state transfer)",
        present: || on_path("rsync"),
        debian: "rsync",
        brew: "rsync",
    },
    Requirement {
        what: "HAProxy (in front of a Galera cluster's nodes)",
        present: || on_path("haproxy"),
        debian: "haproxy",
        brew: "haproxy",
    },
    Requirement {
        what: "PgBouncer",
        present: || on_path("pgbouncer"),
        debian: "pgbouncer",
        brew: "pgbouncer",
    },
    Requirement {
        what: "ss (iproute2: the tests read a listening socket's backlog)",
        present: || on_path("ss"),
        debian: "iproute2",
        brew: "iproute2mac",
    },
    Requirement {
        what: "Redis server",
        present: || on_path("redis-server"),
        debian: "redis-server",
        brew: "redis",
    },
    Requirement {
        what: "Redis Sentinel (redis-sentinel, for the Sentinel cluster)",
        present: || on_path("redis-sentinel"),
        debian: "redis-sentinel",
        brew: "redis",
    },
    Requirement {
        what: "Redis tools (redis-cli, redis-benchmark)",
        present: || on_path("redis-cli") && on_path("redis-benchmark"),
        debian: "redis-tools",
        brew: "redis",
    },
    Requirement {
        what: "memcached",
        present: || on_path("memcached"),
        debian: "memcached",
        brew: "memcached",
    },
    Requirement {
        what: "wrk (HTTP load generator, for comparison runs)",
        present: || on_path("wrk"),
        debian: "wrk",
        brew: "wrk",
    },
    Requirement {
        what: "a Compose client (to validate docker-compose.yml; no Docker engine needed)",
        present: || on_path("docker-compose"),
        debian: "docker-compose",
        brew: "docker-compose",
    },
    Requirement {
        what: "MariaDB client (mariadb, mysqlslap)",
        present: || on_path("mariadb") && on_path("mysqlslap"),
        debian: "mariadb-client",
        brew: "mariadb",
    },
    Requirement {
        what: "Java runtime (for ZooKeeper)",
        present: || on_path("java"),
        debian: "default-jre-headless",
        brew: "openjdk",
    },
    Requirement {
        what: "ZooKeeper (/usr/share/java/zookeeper.jar)",
        present: || Path::new("/usr/share/java/zookeeper.jar").exists(),
        debian: "zookeeper",
        brew: "zookeeper",
    },
    Requirement {
        what: "etcd server",
        present: || on_path("etcd"),
        debian: "etcd-server",
        brew: "etcd",
    },
    Requirement {
        what: "protoc (etcd-client's build)",
        present: || on_path("protoc"),
        debian: "protobuf-compiler",
        brew: "protobuf",
    },
    Requirement {
        what: "Chromium (the browser tests of the live page and report.html)",
        present: || on_path("chromium"),
        debian: "chromium",
        brew: "chromium",
    },
    Requirement {
        what: "chromedriver (WebDriver for Chromium)",
        present: || on_path("chromedriver"),
        debian: "chromium-driver",
        brew: "chromedriver",
    },
    Requirement {
        what: "protobuf's well-known .proto files",
        present: || Path::new("/usr/include/google/protobuf/descriptor.proto").exists(),
        debian: "libprotobuf-dev",
        brew: "protobuf",
    },
];

pub fn run() -> Result<()> {
    servers()?;
    schemathesis()?;
    println!("xtask: setup: schemathesis {SCHEMATHESIS} is installed");
    lock_peers()?;
    println!(
        "xtask: setup: the lock peers ({}) are installed",
        LOCK_PEERS.join(", ")
    );
    Ok(())
}

fn servers() -> Result<()> {
    let missing: Vec<&Requirement> = REQUIREMENTS.iter().filter(|r| !(r.present)()).collect();
    if missing.is_empty() {
        println!("xtask: setup: all server programs are installed");
        return Ok(());
    }
    for r in &missing {
        println!("xtask: setup: missing {}", r.what);
    }
    let debian: Vec<&str> = dedup(missing.iter().map(|r| r.debian));
    if is_root() && on_path("apt-get") {
        apt_install(&debian)?;
        let still: Vec<&str> = REQUIREMENTS
            .iter()
            .filter(|r| !(r.present)())
            .map(|r| r.what)
            .collect();
        if still.is_empty() {
            return Ok(());
        }
        bail!("still missing after apt-get install: {}", still.join(", "));
    }
    let brew: Vec<&str> = dedup(missing.iter().map(|r| r.brew));
    bail!(
        "install the missing programs, then run `cargo xtask setup` again:\n  \
         Debian/Ubuntu: sudo apt-get update && sudo apt-get install -y --no-install-recommends {}\n  \
         macOS:         brew install {}",
        debian.join(" "),
        brew.join(" ")
    )
}

/// The schemathesis release the contract test is known to pass with; bump it deliberately.
const SCHEMATHESIS: &str = "4.32.5";

/// The `st` program of schemathesis [`SCHEMATHESIS`], installed with pip into a venv under
/// `~/.cache/seckill-bench/` (outside the target dir, so `cargo clean` keeps it) if not there.
pub fn schemathesis() -> Result<PathBuf> {
    let venv = cache_dir()?.join("venv");
    let st = venv.join("bin").join("st");
    let installed = || {
        Command::new(&st).arg("--version").output().is_ok_and(|o| {
            String::from_utf8_lossy(&o.stdout)
                .trim()
                .ends_with(SCHEMATHESIS)
        })
    };
    if installed() {
        return Ok(st);
    }
    println!(
        "xtask: setup: installing schemathesis {SCHEMATHESIS} into {}",
        venv.display()
    );
    make_venv(&venv)?;
    let pip = Command::new(venv.join("bin").join("pip"))
        .args([
            "install",
            "--quiet",
            &format!("schemathesis=={SCHEMATHESIS}"),
        ])
        .status()?;
    if !pip.success() || !installed() {
        bail!("pip install schemathesis=={SCHEMATHESIS} failed ({pip})");
    }
    Ok(st)
}

/// The Python lock libraries `seckill-bench lock peers` runs beside ours
/// (`loadtest/peers/lock_peers.py`), pinned; bump them deliberately.
const LOCK_PEERS: &[&str] = &["redis==8.1.0", "python-redis-lock==4.0.1", "kazoo==2.11.0"];

/// The venv's Python with [`LOCK_PEERS`] installed (into the schemathesis venv, if missing).
pub fn lock_peers() -> Result<PathBuf> {
    let venv = cache_dir()?.join("venv");
    let python = venv.join("bin").join("python");
    // `pip freeze` spells each installed distribution `name==version`, as the pins are.
    let installed = || {
        Command::new(&python)
            .args(["-m", "pip", "freeze"])
            .output()
            .is_ok_and(|o| {
                let frozen = String::from_utf8_lossy(&o.stdout).to_lowercase();
                let lines: Vec<&str> = frozen.lines().collect();
                LOCK_PEERS.iter().all(|pin| lines.contains(pin))
            })
    };
    if installed() {
        return Ok(python);
    }
    println!(
        "xtask: setup: installing {} into {}",
        LOCK_PEERS.join(" "),
        venv.display()
    );
    make_venv(&venv)?;
    let pip = Command::new(venv.join("bin").join("pip"))
        .args(["install", "--quiet"])
        .args(LOCK_PEERS)
        .status()?;
    if !pip.success() || !installed() {
        bail!("pip install {} failed ({pip})", LOCK_PEERS.join(" "));
    }
    Ok(python)
}

/// Creates the venv at `venv` unless it has its pip already.
fn make_venv(venv: &Path) -> Result<()> {
    if venv.join("bin").join("pip").is_file() {
        return Ok(());
    }
    let made = Command::new("python3")
        .args(["-m", "venv"])
        .arg(venv)
        .status()
        .context("running python3 -m venv (install python3 and python3-venv)")?;
    if !made.success() {
        bail!("python3 -m venv {} failed with {made}", venv.display());
    }
    Ok(())
}

/// `$XDG_CACHE_HOME/seckill-bench`, else `~/.cache/seckill-bench`.
fn cache_dir() -> Result<PathBuf> {
    let base = match std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").context("HOME is not set")?).join(".cache"),
    };
    Ok(base.join("seckill-bench"))
}

fn apt_install(packages: &[&str]) -> Result<()> {
    println!("xtask: setup: apt-get install {}", packages.join(" "));
    let update = Command::new("apt-get").args(["update", "-qq"]).status()?;
    if !update.success() {
        bail!("apt-get update failed with {update}");
    }
    let install = Command::new("apt-get")
        .args(["install", "-y", "-qq", "--no-install-recommends"])
        .args(packages)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()?;
    if !install.success() {
        bail!("apt-get install failed with {install}");
    }
    Ok(())
}

fn on_path(program: &str) -> bool {
    let Some(path) = std::env::var_os("PATH") else {
        return false;
    };
    // Debian puts mariadbd in /usr/sbin, which a non-login PATH may lack.
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .any(|dir| dir.join(program).is_file())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn dedup<'a>(items: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut out: Vec<&str> = Vec::new();
    for i in items {
        if !out.contains(&i) {
            out.push(i);
        }
    }
    out
}
