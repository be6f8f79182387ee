//! The world a run measures in: what the rig starts and how the app reaches it.
//!
//! Every phase measures the strategies in one world, and hands the same world to each. A
//! network sweep, a second engine, replicated or clustered servers are other worlds for the
//! same phases, not phases of their own: a phase reads from the world what it depends on (the
//! instances whose limits add up, today) and nothing decides by hand which world it is in.
//!
//! `report.json` does not carry the world yet: its keys are part of the schema (version 2),
//! and a run in any other world cannot be made yet. The type serializes as the report will
//! write it once a second world exists.

use serde::{Deserialize, Serialize};

/// What the rig starts and how the app reaches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct World {
    /// The database the strategies keep their rows in.
    pub engine: Engine,
    /// How many servers of each kind, and how they are joined.
    pub topology: Topology,
    /// What lies between the app instances and the servers.
    pub distance: Distance,
    /// `seckill-app` processes, the purchases spread over them in turn.
    pub instances: usize,
}

/// The database engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Engine {
    MariaDb,
}

/// How the servers are arranged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Topology {
    /// One MariaDB, one Redis: no replica, no cluster.
    OneNode,
}

/// The network between the app instances and the servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Distance {
    /// None: one machine, loopback, no delay added.
    Local,
}

impl World {
    /// The world the rig starts today: `instances` app processes on this machine beside one
    /// MariaDB and one Redis.
    pub fn local(instances: usize) -> World {
        World {
            engine: Engine::MariaDb,
            topology: Topology::OneNode,
            distance: Distance::Local,
            instances,
        }
    }
}
