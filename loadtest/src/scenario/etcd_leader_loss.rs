//! `etcd-leader-loss`: the etcd cluster's leader is killed while four clients contend for one
//! lock, and restarted a few seconds later. What it must show, and why, is what
//! `zk-leader-loss` shows on ZooKeeper: the play is theirs in common (`skeleton::leader_loss`);
//! here is only the cluster.

use locks::Backend;

pub use super::skeleton::leader_loss::Figures;
use super::skeleton::leader_loss::{Contended, LeaderLoss};

pub type EtcdLeaderLoss = LeaderLoss<sandbox::EtcdCluster>;

impl Contended for sandbox::EtcdCluster {
    const BACKEND: Backend = Backend::Etcd;
    const KIND: &'static str = "etcd cluster";

    fn start() -> sandbox::Result<Self> {
        sandbox::EtcdCluster::start()
    }
}
