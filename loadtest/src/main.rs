//! `seckill-bench`: for now, starts the throwaway servers, prints where they listen and which
//! versions they run, and stops them again. The benchmark proper replaces this.

use std::time::Instant;

fn main() -> anyhow::Result<()> {
    let started = Instant::now();
    let servers = sandbox::Servers::start()?;
    let up = started.elapsed();
    let endpoints = servers.endpoints();
    let versions = servers.versions()?;
    println!("servers up in {:.1} s", up.as_secs_f64());
    for (name, value) in endpoints.env_vars() {
        println!("  {name:<18} {value}");
    }
    println!("  versions           {versions:?}");
    drop(servers);
    println!("servers stopped");
    Ok(())
}
