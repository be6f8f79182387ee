//! Purchase tokens: the "hidden URL" of many flash-sale systems, without a URL to hide. A
//! product can require that a purchase carry a token the service issues to a buyer only once
//! the sale is open (`POST /api/products/{id}/tokens`). A bot that fires before the start, or
//! skips the step, is refused from memory, without touching stock.
//!
//! A token is `HMAC-SHA-256(secret, product, buyer, sale start)`, base64url-encoded: any
//! instance that knows the secret verifies it with no state and no round trip, it names one
//! buyer of one sale (a reset with another start makes old tokens worthless), and it cannot be
//! made without the secret. It slows a bot down to the speed of the sale's opening, no more:
//! a bot with many accounts asks for many tokens, which is what per-user and per-address rate
//! limits are for.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The secret tokens are signed with.
#[derive(Clone)]
pub struct TokenKey {
    secret: Vec<u8>,
}

impl std::fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenKey(…)")
    }
}

impl TokenKey {
    /// A key from a configured secret.
    pub fn new(secret: &[u8]) -> TokenKey {
        TokenKey {
            secret: secret.to_vec(),
        }
    }

    /// A key of 32 random bytes: tokens it signs are good on this instance only.
    pub fn random() -> TokenKey {
        TokenKey::new(&rand::random::<[u8; 32]>())
    }

    fn mac(&self, product: u64, user_id: &str, sale_starts_ms: Option<i64>) -> Hmac<Sha256> {
        // Every field is delimited or length-prefixed, so no two inputs sign the same bytes.
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.secret)
            .unwrap_or_else(|_| unreachable!("HMAC takes a key of any length"));
        let message = format!(
            "seckill-purchase-token\n{product}\n{}:{user_id}\n{}",
            user_id.len(),
            sale_starts_ms.map_or_else(|| "-".to_string(), |ms| ms.to_string())
        );
        mac.update(message.as_bytes());
        mac
    }

    /// The token of `user_id` for the sale of `product` that starts at `sale_starts_ms`.
    pub fn issue(&self, product: u64, user_id: &str, sale_starts_ms: Option<i64>) -> String {
        let tag = self
            .mac(product, user_id, sale_starts_ms)
            .finalize()
            .into_bytes();
        URL_SAFE_NO_PAD.encode(tag)
    }

    /// Whether `token` is the one [`TokenKey::issue`] gives for these, compared in constant
    /// time.
    pub fn verify(
        &self,
        token: &str,
        product: u64,
        user_id: &str,
        sale_starts_ms: Option<i64>,
    ) -> bool {
        let Ok(tag) = URL_SAFE_NO_PAD.decode(token) else {
            return false;
        };
        self.mac(product, user_id, sale_starts_ms)
            .verify_slice(&tag)
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_good_for_its_buyer_product_and_sale_only() {
        let key = TokenKey::new(b"secret");
        let token = key.issue(7, "alice", Some(1_000));
        assert!(key.verify(&token, 7, "alice", Some(1_000)));
        assert!(!key.verify(&token, 8, "alice", Some(1_000)));
        assert!(!key.verify(&token, 7, "Alice", Some(1_000)));
        assert!(!key.verify(&token, 7, "alice", Some(2_000)));
        assert!(!key.verify(&token, 7, "alice", None));
        assert!(!TokenKey::new(b"other").verify(&token, 7, "alice", Some(1_000)));
        assert!(!key.verify("not-a-token!", 7, "alice", Some(1_000)));
    }
}
