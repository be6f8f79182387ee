//! Buyer identity: who a buyer is, as the service can check it. Without it a buyer is whatever
//! `user_id` a request names, and anyone who knows a buyer's id and request id can read, pay or
//! cancel that buyer's order, or buy as a hundred invented buyers past a one-per-customer limit.
//! So a deployment sets a buyer key (`--buyer-key`), or says it takes buyers on their word
//! (`--anonymous-buyers`, for a benchmark on a closed network): it does not start otherwise.
//!
//! With a buyer key, every buyer route (purchase, status, pay, cancel, purchase token) requires
//! `Authorization: Bearer <buyer token>` and takes the buyer from it: a request's `user_id` may
//! be left out, and when given must be the token's. A token is the statement "this is `user_id`
//! until `expires_at`", signed: `<expiry, unix seconds>.<user id, base64url>.<HMAC-SHA-256,
//! base64url>`. Whoever holds the key — the sign-in service of a real deployment, the
//! benchmark's crowd, the tests, `seckill-app buyer-token` for a person with curl — mints
//! tokens; any instance verifies one with a single HMAC, no state and no round trip, and
//! allocates nothing to do so. Signing and checking never decode the user id: the MAC covers
//! the token's own bytes, and a request's `user_id` is compared with it encoded. Only a request
//! that names no buyer has the token's decoded, once.

use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::api::MAX_USER_ID;

/// What every signed statement starts with, so that no other MAC of the same key (a purchase
/// token, should one deployment use one secret for both) is a buyer token.
const DOMAIN: &[u8] = b"seckill-buyer-token\n";

/// The largest base64url of a user id: [`MAX_USER_ID`] characters of up to four bytes each.
const MAX_ENCODED: usize = (MAX_USER_ID * 4).div_ceil(3) * 4;

/// The key buyer tokens are signed and verified with.
#[derive(Clone)]
pub struct BuyerKey {
    /// The MAC keyed once, [`DOMAIN`] already in: each token's MAC starts from a copy, rather
    /// than hashing the key's two padded blocks again — half the hashing of a verification.
    keyed: Hmac<Sha256>,
}

impl std::fmt::Debug for BuyerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BuyerKey(…)")
    }
}

/// Why a token does not say who the buyer is: missing, malformed, expired or forged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("missing, malformed, expired or forged buyer token")]
pub struct Unauthenticated;

/// A verified token: the buyer it names, still encoded as it came.
#[derive(Debug, Clone, Copy)]
pub struct Verified<'t> {
    encoded_user: &'t str,
}

impl Verified<'_> {
    /// Whether the token names `user_id` (its bytes, exactly).
    pub fn names(&self, user_id: &str) -> bool {
        let mut buffer = [0u8; MAX_ENCODED];
        match URL_SAFE_NO_PAD.encode_slice(user_id, &mut buffer) {
            Ok(n) => &buffer[..n] == self.encoded_user.as_bytes(),
            Err(_) => false,
        }
    }

    /// The user id the token names, decoded (`None` if it is no user id: longer than
    /// [`MAX_USER_ID`] can be, or not UTF-8 — which only a careless signer writes).
    pub fn user_id(&self) -> Option<String> {
        if self.encoded_user.len() > MAX_ENCODED {
            return None;
        }
        let bytes = URL_SAFE_NO_PAD.decode(self.encoded_user).ok()?;
        String::from_utf8(bytes).ok()
    }
}

impl BuyerKey {
    /// A key from a configured secret.
    pub fn new(secret: &[u8]) -> BuyerKey {
        let mut keyed = Hmac::<Sha256>::new_from_slice(secret)
            .unwrap_or_else(|_| unreachable!("HMAC takes a key of any length"));
        keyed.update(DOMAIN);
        BuyerKey { keyed }
    }

    fn mac(&self, statement: &[u8]) -> Hmac<Sha256> {
        let mut mac = self.keyed.clone();
        mac.update(statement);
        mac
    }

    /// The token of `user_id`, good until `expires_at` (to the second).
    pub fn sign(&self, user_id: &str, expires_at: SystemTime) -> String {
        let expires = expires_at
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let statement = format!("{expires}.{}", URL_SAFE_NO_PAD.encode(user_id));
        let tag = self.mac(statement.as_bytes()).finalize().into_bytes();
        format!("{statement}.{}", URL_SAFE_NO_PAD.encode(tag))
    }

    /// The buyer `token` names, if this key signed it and it has not expired at `now`. The tag
    /// is compared in constant time.
    pub fn verify<'t>(
        &self,
        token: &'t str,
        now: SystemTime,
    ) -> Result<Verified<'t>, Unauthenticated> {
        let (statement, tag) = token.rsplit_once('.').ok_or(Unauthenticated)?;
        let mut decoded = [0u8; 33];
        let n = URL_SAFE_NO_PAD
            .decode_slice(tag, &mut decoded)
            .map_err(|_| Unauthenticated)?;
        self.mac(statement.as_bytes())
            .verify_slice(&decoded[..n])
            .map_err(|_| Unauthenticated)?;
        let (expires, encoded_user) = statement.split_once('.').ok_or(Unauthenticated)?;
        let expires: u64 = expires.parse().map_err(|_| Unauthenticated)?;
        let now = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        if now >= expires {
            return Err(Unauthenticated);
        }
        Ok(Verified { encoded_user })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn later(secs: u64) -> SystemTime {
        SystemTime::now() + Duration::from_secs(secs)
    }

    #[test]
    fn a_token_names_its_buyer_until_it_expires() {
        let key = BuyerKey::new(b"secret");
        let token = key.sign("alice", later(60));
        let verified = key.verify(&token, SystemTime::now()).expect("valid");
        assert!(verified.names("alice"));
        assert_eq!(verified.user_id().as_deref(), Some("alice"));
        assert!(!verified.names("Alice"));
        assert!(!verified.names("alice "));
        assert_eq!(key.verify(&token, later(61)).err(), Some(Unauthenticated));
    }

    #[test]
    fn a_token_is_the_hmac_sha_256_of_its_domain_and_statement_as_another_library_computes_it() {
        // Python's `hmac.new(b"secret", b"seckill-buyer-token\n" + statement, sha256)`: a
        // sign-in service written in another language mints the same token.
        let key = BuyerKey::new(b"secret");
        let token = key.sign("alice", UNIX_EPOCH + Duration::from_secs(2_000_000_000));
        assert_eq!(
            token,
            "2000000000.YWxpY2U.SBUQBl4IB8Eap4f5Kwa1GrF2m-YjPnRKs6VS_Dq9zpA"
        );
        // The same key verifies it twice: the keyed state each check starts from is a copy.
        let at = UNIX_EPOCH + Duration::from_secs(1_999_999_999);
        assert!(key.verify(&token, at).is_ok());
        assert!(key.verify(&token, at).unwrap().names("alice"));
    }

    #[test]
    fn a_token_of_another_key_or_altered_is_refused() {
        let key = BuyerKey::new(b"secret");
        let token = key.sign("alice", later(60));
        let other = BuyerKey::new(b"other").sign("alice", later(60));
        assert!(key.verify(&other, SystemTime::now()).is_err());
        let bob = URL_SAFE_NO_PAD.encode("bob");
        let alice = URL_SAFE_NO_PAD.encode("alice");
        let swapped = token.replacen(&alice, &bob, 1);
        assert!(key.verify(&swapped, SystemTime::now()).is_err());
        let (statement, tag) = token.rsplit_once('.').expect("a tag");
        let extended = format!("9{statement}.{tag}");
        assert!(key.verify(&extended, SystemTime::now()).is_err());
        for junk in ["", ".", "..", "x.y.z", "not a token", "1.YQ.!!!!"] {
            assert!(key.verify(junk, SystemTime::now()).is_err(), "{junk:?}");
        }
    }

    #[test]
    fn the_longest_user_id_fits_the_comparison() {
        let key = BuyerKey::new(b"secret");
        let longest = "\u{1F600}".repeat(MAX_USER_ID);
        let token = key.sign(&longest, later(60));
        let verified = key.verify(&token, SystemTime::now()).expect("valid");
        assert!(verified.names(&longest));
        assert_eq!(verified.user_id(), Some(longest.clone()));
        assert!(!verified.names(&"\u{1F600}".repeat(MAX_USER_ID + 1)));
    }
}
