//! `zk-leader-loss`: the ZooKeeper ensemble's leader is killed while four clients contend for
//! one lock, and restarted a few seconds later. What it must show, and why, is what
//! `etcd-leader-loss` shows on etcd: the play is theirs in common (`skeleton::leader_loss`);
//! here is only the cluster.

use locks::Backend;

pub use super::skeleton::leader_loss::Figures;
use super::skeleton::leader_loss::{Contended, LeaderLoss};

pub type ZkLeaderLoss = LeaderLoss<sandbox::ZooKeeperEnsemble>;

impl Contended for sandbox::ZooKeeperEnsemble {
    const BACKEND: Backend = Backend::ZooKeeper;
    const KIND: &'static str = "ZooKeeper ensemble";

    fn start() -> sandbox::Result<Self> {
        sandbox::ZooKeeperEnsemble::start()
    }
}
