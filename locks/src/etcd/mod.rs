//! etcd lock. (Being written.)
