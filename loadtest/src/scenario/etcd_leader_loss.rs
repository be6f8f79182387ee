//! `etcd-leader-loss`: the etcd cluster's leader is killed while four clients contend for
//! one lock, and restarted a few seconds later. What it must show, and why, is what
//! `zk-leader-loss` shows on ZooKeeper: see the shared play (`skeleton::leader_loss`).

use std::sync::Arc;

use anyhow::Result;
use locks::Backend;

pub use super::skeleton::leader_loss::Figures;
use super::skeleton::leader_loss::{self, Sizes};
use super::{Judgement, Scenario, Stage};
use crate::rig::start;

pub struct EtcdLeaderLoss;

impl Scenario for EtcdLeaderLoss {
    type Sizes = Sizes;
    const QUICK: Sizes = leader_loss::QUICK;
    const FULL: Sizes = leader_loss::FULL;
    type Subject = String;
    type Figures = Figures;

    fn fault(s: &Sizes) -> String {
        leader_loss::fault("etcd cluster", s)
    }

    async fn play(s: Sizes, stage: &Stage) -> Result<Vec<(String, Figures)>> {
        let cluster = Arc::new(start(sandbox::EtcdCluster::start).await?);
        leader_loss::play(Backend::Etcd, cluster, s, stage).await
    }

    fn judge(_: &Sizes, _: &String, f: &Figures) -> Judgement {
        leader_loss::judge(f)
    }

    fn why(_: &Sizes, rows: &[(String, Figures)]) -> String {
        rows.iter()
            .map(|(_, f)| leader_loss::why(Backend::Etcd, f))
            .collect()
    }
}
