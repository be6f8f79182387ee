//! ZooKeeper lock. (Being written.)
