//! Purchase tokens: the "hidden URL" of many flash-sale systems, without a URL to hide. A
//! product can require that a purchase carry a token the service issues to a buyer only once
//! the sale is open (`POST /api/products/{id}/tokens`). A bot that fires before the start, or
//! skips the step, is refused from memory, without touching stock.
//!
//! A token is `request id . expiry . HMAC-SHA-256(secret, product, buyer, sale start, request
//! id, expiry)`, the MAC base64url-encoded: any instance that knows the secret verifies it with
//! no state and no round trip, it names one buyer of one sale (a reset with another start makes
//! old tokens worthless), and it cannot be made, nor its request id or expiry changed, without
//! the secret.
//!
//! **One purchase.** The request id is minted by the service (128 random bits) and a purchase
//! that shows the token must carry it (`purchase_token_mismatch` otherwise). A request id makes
//! at most one order — the orders' unique key on product, buyer and request id is the
//! idempotency arbiter every strategy goes through — so a token buys at most once, and no
//! instance keeps a list of spent tokens: the order it bought is the record that it is spent.
//! The same purchase sent again (same request id, same token) is a replay, answered with its
//! order. A token good for every purchase of its buyer, as a MAC of product, buyer and sale
//! alone was, lets one token request feed a bot's every click; now each click costs a token
//! request, which counts against the buyer's and the address's rates.
//!
//! **Until it expires.** Past its expiry (`--purchase-token-ttl-ms`, by the wall clock of the
//! instance that judges it: the instances' clocks must agree to within what the lifetime
//! allows) a token admits no new purchase (`purchase_token_expired`). A hoarded or leaked token
//! is worth a minute, not the whole sale. The purchase it made is still answered: a buyer whose
//! first answer was lost retries after the expiry and must get the order it has, not a refusal
//! that hides it; so an expiry is refused only once the purchase is found not to exist (see
//! `http::orders::admit`), a read paid only by the holder of a genuine token.
//!
//! It slows a bot down to the speed of the sale's opening and of its token requests, no more:
//! a bot with many accounts asks for many tokens, which is what per-user and per-address rate
//! limits are for.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// `at` in milliseconds since the Unix epoch, the unit of a token's expiry.
pub fn epoch_ms(at: time::OffsetDateTime) -> i64 {
    i64::try_from(at.unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX)
}

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

/// The purchase a token is for, or shown with: a buyer's purchase, under a request id, of a
/// product whose sale starts at `sale_starts_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim<'a> {
    pub product: u64,
    pub user_id: &'a str,
    pub sale_starts_ms: Option<i64>,
    pub request_id: &'a str,
}

/// A token as issued: the string its buyer shows, the request id of the one purchase it
/// admits, and when it expires (milliseconds since the Unix epoch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issued {
    pub token: String,
    pub request_id: String,
    pub expires_ms: i64,
}

/// Why a token does not admit a purchase.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// Not a token, or not one this key issued for this buyer and this product's sale.
    #[error("not this buyer's token for this sale")]
    Forged,
    /// A genuine token, shown with another purchase than the one it admits.
    #[error("this token admits one purchase, request id `{admits}`")]
    OtherPurchase { admits: String },
    /// A genuine token for this purchase, past its expiry.
    #[error("this token expired at {expires_ms} ms since the epoch")]
    Expired { expires_ms: i64 },
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

    fn mac(&self, claim: Claim<'_>, expires_ms: i64) -> Hmac<Sha256> {
        // Every field is delimited or length-prefixed, so no two inputs sign the same bytes.
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.secret)
            .unwrap_or_else(|_| unreachable!("HMAC takes a key of any length"));
        let Claim {
            product,
            user_id,
            sale_starts_ms,
            request_id,
        } = claim;
        let message = format!(
            "seckill-purchase-token\n{product}\n{}:{user_id}\n{}\n{}:{request_id}\n{expires_ms}",
            user_id.len(),
            sale_starts_ms.map_or_else(|| "-".to_string(), |ms| ms.to_string()),
            request_id.len(),
        );
        mac.update(message.as_bytes());
        mac
    }

    /// The token of `claim`'s purchase, good until `expires_ms`. The request id is in the
    /// token in clear (it is no secret: the purchase carries it too), then the expiry, then the
    /// MAC, each after a `.`.
    fn sign(&self, claim: Claim<'_>, expires_ms: i64) -> String {
        let tag = self.mac(claim, expires_ms).finalize().into_bytes();
        format!(
            "{}.{expires_ms}.{}",
            claim.request_id,
            URL_SAFE_NO_PAD.encode(tag)
        )
    }

    /// A token for one purchase of `user_id` in the sale of `product` that starts at
    /// `sale_starts_ms`, good until `expires_ms`, under a request id minted here: 128 random
    /// bits, so that each token names a purchase of its own.
    pub fn issue(
        &self,
        product: u64,
        user_id: &str,
        sale_starts_ms: Option<i64>,
        expires_ms: i64,
    ) -> Issued {
        let request_id = URL_SAFE_NO_PAD.encode(rand::random::<[u8; 16]>());
        let claim = Claim {
            product,
            user_id,
            sale_starts_ms,
            request_id: &request_id,
        };
        let token = self.sign(claim, expires_ms);
        Issued {
            token,
            request_id,
            expires_ms,
        }
    }

    /// Whether `token` admits the purchase `shown` at `at_ms` (milliseconds since the epoch):
    /// issued by this key for its buyer and product's sale (its MAC compared in constant
    /// time), under its request id, and not expired. Judged in that order: a token is said to
    /// name another purchase, or to have expired, only once it is known to be genuine.
    pub fn check(&self, token: &str, shown: Claim<'_>, at_ms: i64) -> Result<(), Refused> {
        let mut parts = token.rsplitn(3, '.');
        let (Some(tag), Some(expires), Some(request_id)) =
            (parts.next(), parts.next(), parts.next())
        else {
            return Err(Refused::Forged);
        };
        let (Ok(tag), Ok(expires_ms)) = (URL_SAFE_NO_PAD.decode(tag), expires.parse::<i64>())
        else {
            return Err(Refused::Forged);
        };
        let issued_for = Claim {
            request_id,
            ..shown
        };
        if self.mac(issued_for, expires_ms).verify_slice(&tag).is_err() {
            return Err(Refused::Forged);
        }
        if request_id != shown.request_id {
            return Err(Refused::OtherPurchase {
                admits: request_id.to_string(),
            });
        }
        if at_ms >= expires_ms {
            return Err(Refused::Expired { expires_ms });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ISSUED_AT: i64 = 1_000_000;
    const EXPIRES: i64 = ISSUED_AT + 60_000;

    fn alices(key: &TokenKey) -> Issued {
        key.issue(7, "alice", Some(1_000), EXPIRES)
    }

    fn shown(issued: &Issued) -> Claim<'_> {
        Claim {
            product: 7,
            user_id: "alice",
            sale_starts_ms: Some(1_000),
            request_id: &issued.request_id,
        }
    }

    #[test]
    fn a_token_is_good_for_its_buyer_product_and_sale_only() {
        let key = TokenKey::new(b"secret");
        let issued = alices(&key);
        let claim = shown(&issued);
        let check = |key: &TokenKey, token: &str, claim| key.check(token, claim, ISSUED_AT);
        assert_eq!(check(&key, &issued.token, claim), Ok(()));
        let others = [
            Claim {
                product: 8,
                ..claim
            },
            Claim {
                user_id: "Alice",
                ..claim
            },
            Claim {
                sale_starts_ms: Some(2_000),
                ..claim
            },
            Claim {
                sale_starts_ms: None,
                ..claim
            },
        ];
        for other in others {
            assert_eq!(
                check(&key, &issued.token, other),
                Err(Refused::Forged),
                "{other:?}"
            );
        }
        let other_key = TokenKey::new(b"other");
        assert_eq!(
            check(&other_key, &issued.token, claim),
            Err(Refused::Forged)
        );
        for malformed in ["not-a-token!", "", "a.b", "r.12.!!", "r.soon.AAAA"] {
            assert_eq!(
                check(&key, malformed, claim),
                Err(Refused::Forged),
                "{malformed}"
            );
        }
    }

    #[test]
    fn a_token_admits_only_the_purchase_it_names() {
        let key = TokenKey::new(b"secret");
        let issued = alices(&key);
        let mine = Claim {
            request_id: "mine",
            ..shown(&issued)
        };
        assert_eq!(
            key.check(&issued.token, mine, ISSUED_AT),
            Err(Refused::OtherPurchase {
                admits: issued.request_id.clone()
            })
        );
        // Its request id or expiry changed in the token, it is no longer the service's.
        let (_, tag) = issued.token.rsplit_once('.').expect("a tag");
        for edited in [
            format!("mine.{EXPIRES}.{tag}"),
            format!("{}.{}.{tag}", issued.request_id, i64::MAX),
        ] {
            let claim = Claim {
                request_id: edited.split('.').next().expect("an id"),
                ..shown(&issued)
            };
            assert_eq!(
                key.check(&edited, claim, ISSUED_AT),
                Err(Refused::Forged),
                "{edited}"
            );
        }
    }

    #[test]
    fn a_token_expires_at_its_expiry() {
        let key = TokenKey::new(b"secret");
        let issued = alices(&key);
        let claim = shown(&issued);
        assert_eq!(key.check(&issued.token, claim, EXPIRES - 1), Ok(()));
        for late in [EXPIRES, EXPIRES + 1] {
            assert_eq!(
                key.check(&issued.token, claim, late),
                Err(Refused::Expired {
                    expires_ms: EXPIRES
                })
            );
        }
    }

    #[test]
    fn every_token_names_a_purchase_of_its_own() {
        let key = TokenKey::new(b"secret");
        let (one, two) = (alices(&key), alices(&key));
        assert_ne!(one.request_id, two.request_id);
        assert_eq!(one.request_id.len(), 22, "128 bits, base64url");
    }
}
