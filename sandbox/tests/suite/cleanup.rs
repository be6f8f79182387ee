//! Nothing outlives the harness: dropping it, or its owner dying without dropping it, leaves
//! no server process and no temporary directory.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn process_exists(pid: u32) -> bool {
    // A zombie (exited, not yet reaped by its parent) is not a running server.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.split_whitespace().nth(2).is_none_or(|s| s != "Z"))
}

fn eventually(what: &str, check: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn dropping_the_whole_set_leaves_no_process_and_no_directory() {
    sandbox::require_faults!();
    let servers = sandbox::Servers::start().unwrap();
    let mut all = vec![
        servers.mariadb.server(),
        servers.redis.server(),
        servers.zookeeper.server(),
        servers.etcd.server(),
    ];
    all.extend(servers.redlock.iter().map(|r| r.server()));
    let left: Vec<(u32, PathBuf)> = all
        .iter()
        .map(|s| (s.pid().unwrap(), s.dir().to_path_buf()))
        .collect();
    for (pid, dir) in &left {
        assert!(process_exists(*pid) && dir.exists());
    }
    drop(servers);
    for (pid, dir) in &left {
        assert!(!process_exists(*pid), "process {pid} still runs");
        assert!(!dir.exists(), "{} still exists", dir.display());
    }
}

const CHILD_FLAG: &str = "SANDBOX_CLEANUP_TEST_CHILD";

/// Run as a child process by the test below: start Redis, say where, exit without dropping.
#[test]
fn child_that_exits_without_dropping() {
    if std::env::var(CHILD_FLAG).is_err() {
        return;
    }
    let redis = sandbox::Redis::start().unwrap();
    let other = Command::new("sleep")
        .arg("300")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let guardian = sandbox::Guardian::watch(other.id()).unwrap();
    println!("GUARDED pid={}", other.id());
    println!(
        "CHILD pid={} dir={}",
        redis.server().pid().unwrap(),
        redis.server().dir().display()
    );
    std::mem::forget(guardian);
    std::process::exit(0);
}

#[test]
fn an_owner_that_exits_without_dropping_leaves_no_server_and_no_guarded_process_behind() {
    sandbox::require_faults!();
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            concat!(module_path!(), "::child_that_exits_without_dropping")
                .split_once("::")
                .expect("the test binary's crate name, then the module")
                .1,
            "--nocapture",
        ])
        .env(CHILD_FLAG, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("CHILD "))
        .unwrap_or_else(|| panic!("child printed no CHILD line: {stdout}"));
    let pid: u32 = line.split_whitespace().next().unwrap()["pid=".len()..]
        .parse()
        .unwrap();
    let dir = Path::new(line.split_once(" dir=").unwrap().1).to_path_buf();
    let guarded: u32 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("GUARDED pid="))
        .unwrap_or_else(|| panic!("child printed no GUARDED line: {stdout}"))
        .parse()
        .unwrap();
    eventually("the orphaned server is killed", || !process_exists(pid));
    eventually("its directory is removed", || !dir.exists());
    eventually("the guarded process is killed", || !process_exists(guarded));
}
