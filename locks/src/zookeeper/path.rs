//! Where a lock's nodes live, and how a contender's node is named and ordered.

/// Parent of every lock directory.
pub const LOCK_ROOT: &str = "/locks";

/// Separates the protection id from the sequence ZooKeeper appends (Curator's spelling).
const LOCK_MARK: &str = "-lock-";

/// The directory whose children queue for lock `key`: `/locks/<key>`, with `%`, `/` and
/// all-dot names escaped so that any key is one valid znode name.
pub fn lock_dir(key: &str) -> String {
    let mut name = key.replace('%', "%25").replace('/', "%2F");
    if name.chars().all(|c| c == '.') {
        name = name.replace('.', "%2E") + "%";
    }
    format!("{LOCK_ROOT}/{name}")
}

/// What a contender asks ZooKeeper to create; the server appends the sequence.
pub(crate) fn node_prefix(dir: &str, owner: &str) -> String {
    format!("{dir}/_c_{owner}{LOCK_MARK}")
}

/// The sequence number of a contender's node name; `None` for names this recipe did not make.
pub(crate) fn sequence(name: &str) -> Option<i64> {
    let (_, digits) = name.rsplit_once(LOCK_MARK)?;
    digits.parse().ok()
}

/// Whether `name` is the node of the acquisition `owner`.
pub(crate) fn is_owned_by(name: &str, owner: &str) -> bool {
    name.strip_prefix("_c_")
        .and_then(|rest| rest.strip_prefix(owner))
        .is_some_and(|rest| rest.starts_with(LOCK_MARK))
}

/// The contenders in queue order: by sequence, foreign names dropped.
pub(crate) fn queue(mut children: Vec<String>) -> Vec<String> {
    children.retain(|name| sequence(name).is_some());
    children.sort_by_key(|name| sequence(name));
    children
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_becomes_one_znode_name_under_the_root() {
        assert_eq!(lock_dir("product:42"), "/locks/product:42");
        assert_eq!(lock_dir("a/b"), "/locks/a%2Fb");
        assert_eq!(lock_dir("50%/x"), "/locks/50%25%2Fx");
        assert_eq!(lock_dir(".."), "/locks/%2E%2E%");
        assert_eq!(lock_dir(""), "/locks/%");
        assert_ne!(lock_dir("a/b"), lock_dir("a%2Fb"));
    }

    #[test]
    fn queue_orders_by_sequence_not_by_name() {
        let children = vec![
            "_c_zzz-lock-0000000002".to_string(),
            "_c_aaa-lock-0000000010".to_string(),
            "stray".to_string(),
            "_c_mmm-lock-0000000001".to_string(),
        ];
        assert_eq!(
            queue(children),
            [
                "_c_mmm-lock-0000000001",
                "_c_zzz-lock-0000000002",
                "_c_aaa-lock-0000000010"
            ]
        );
    }

    #[test]
    fn a_contender_recognises_only_its_own_node() {
        assert!(is_owned_by("_c_abc-lock-0000000007", "abc"));
        assert!(!is_owned_by("_c_abcd-lock-0000000007", "abc"));
        assert!(!is_owned_by("_c_xabc-lock-0000000007", "abc"));
    }
}
