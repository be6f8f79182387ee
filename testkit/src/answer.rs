//! How a request to the app ended ([`Answer`]), and how many requests ended each way
//! ([`Outcomes`], every error code apart): what the load, the crowds and the scenarios count.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Deserializer, Serialize};

use app::api::{ErrorBody, ErrorCode, OrderRequest, OrderResponse, OrderStatus, Strategy};

/// How one request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub enum Answer {
    /// `201`: a new order (for the baselines that bypass HTTP: a deduction).
    Created { fencing_token: Option<u64> },
    /// `200` to an order: the original order of a replayed request id.
    Replayed { fencing_token: Option<u64> },
    /// An error answer of the contract: its status and code.
    Refused { status: u16, code: ErrorCode },
    /// A `2xx` to a request that places no order (`GET /api/noop`).
    Served { status: u16 },
    /// An answer outside the contract: another status, or a body that is not the documented one.
    Unexpected { status: u16 },
    /// No answer: connection refused or reset, timeout (for the baselines that bypass HTTP: the
    /// backend call failed).
    Transport,
}

impl Answer {
    /// The `409 sold_out` refusal (also what the direct baselines answer when stock ran out).
    pub const SOLD_OUT: Answer = Answer::Refused {
        status: 409,
        code: ErrorCode::SoldOut,
    };

    /// Classifies the answer to `POST …/orders`.
    pub fn of_order(status: u16, body: &[u8]) -> Answer {
        match status {
            201 | 200 => match serde_json::from_slice::<OrderResponse>(body) {
                Ok(o) if status == 201 => Answer::Created {
                    fencing_token: o.fencing_token,
                },
                Ok(o) => Answer::Replayed {
                    fencing_token: o.fencing_token,
                },
                Err(_) => Answer::Unexpected { status },
            },
            // Accepted, placed later by the stream consumers (`redis-lua-stream`): counted as
            // created, since the sale waits for the stream to drain before it reads the ledger.
            202 => match serde_json::from_slice::<OrderStatus>(body) {
                Ok(_) => Answer::Created {
                    fencing_token: None,
                },
                Err(_) => Answer::Unexpected { status },
            },
            _ => Answer::of_error(status, body),
        }
    }

    /// Classifies the answer to a request that places no order.
    pub fn of_request(status: u16, body: &[u8]) -> Answer {
        match status {
            200..=299 => Answer::Served { status },
            _ => Answer::of_error(status, body),
        }
    }

    fn of_error(status: u16, body: &[u8]) -> Answer {
        if status >= 400
            && let Some(code) = written_shape(body)
        {
            return Answer::Refused { status, code };
        }
        match serde_json::from_slice::<ErrorBody>(body) {
            Ok(b) if status >= 400 => Answer::Refused {
                status,
                code: b.error,
            },
            _ => Answer::Unexpected { status },
        }
    }

    /// Whether this answer is a new order.
    pub fn created(&self) -> bool {
        matches!(self, Answer::Created { .. })
    }

    /// Whether this answer is a refusal with `code`.
    pub fn refused_with(&self, code: ErrorCode) -> bool {
        matches!(self, Answer::Refused { code: c, .. } if *c == code)
    }

    /// `201 order placed, token 7`, `409 lock_lost`, …
    pub fn describe(&self) -> String {
        let placed = |status: u16, what: &str, token: Option<u64>| match token {
            Some(t) => format!("{status} {what}, token {t}"),
            None => format!("{status} {what}"),
        };
        match self {
            Answer::Created { fencing_token } => placed(201, "order placed", *fencing_token),
            Answer::Replayed { fencing_token } => placed(200, "order replayed", *fencing_token),
            Answer::Refused { status, code } => format!("{status} {code}"),
            Answer::Served { status } => format!("{status}"),
            Answer::Unexpected { status } => format!("{status} (outside the contract)"),
            Answer::Transport => "no answer (transport error)".into(),
        }
    }
}

/// How many requests of a phase ended each way: every error code apart.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Outcomes {
    /// `201`: new orders (for the direct baselines: deductions).
    pub created: u64,
    /// `200`: the original orders of replayed request ids.
    pub replayed: u64,
    /// Refusals by error code (`sold_out`, `lock_lost`, `busy`, …), each a key of its own.
    #[serde(flatten)]
    pub refused: Refusals,
    /// `2xx` answers to requests that place no order (`GET /api/noop`).
    pub served: u64,
    /// Answers outside the contract, by status.
    pub unexpected: BTreeMap<u16, u64>,
    /// Requests that got no answer.
    pub transport_error: u64,
}

impl Outcomes {
    pub fn count(&mut self, answer: &Answer) {
        match *answer {
            Answer::Created { .. } => self.created += 1,
            Answer::Replayed { .. } => self.replayed += 1,
            Answer::Refused { code, .. } => *self.refused.entry(code) += 1,
            Answer::Served { .. } => self.served += 1,
            Answer::Unexpected { status } => *self.unexpected.entry(status).or_default() += 1,
            Answer::Transport => self.transport_error += 1,
        }
    }

    pub fn add(&mut self, o: &Outcomes) {
        self.created += o.created;
        self.replayed += o.replayed;
        for (code, n) in o.refused.iter() {
            *self.refused.entry(code) += n;
        }
        self.served += o.served;
        for (status, n) in &o.unexpected {
            *self.unexpected.entry(*status).or_default() += n;
        }
        self.transport_error += o.transport_error;
    }

    pub fn total(&self) -> u64 {
        self.created
            + self.replayed
            + self.refused.iter().map(|(_, n)| n).sum::<u64>()
            + self.served
            + self.unexpected.values().sum::<u64>()
            + self.transport_error
    }

    /// Refusals with `code`.
    pub fn refused(&self, code: ErrorCode) -> u64 {
        self.refused.0[Refusals::index(code)]
    }

    /// Requests that failed rather than being answered by the purchase contract: no answer,
    /// an answer outside the contract, or a refusal of the request itself (invalid, unknown
    /// strategy, internal error, …) rather than of the purchase.
    pub fn errors(&self) -> u64 {
        let request_refusals: u64 = self
            .refused
            .iter()
            .filter(|(code, _)| !is_purchase_refusal(*code))
            .map(|(_, n)| n)
            .sum();
        self.transport_error + self.unexpected.values().sum::<u64>() + request_refusals
    }
}

/// Refusal counts, one per [`ErrorCode`]; serialized as `{"sold_out": 3, …}` with the codes
/// that occurred, in [`ErrorCode::ALL`] order (and so printed by `{:?}`).
#[derive(Clone, PartialEq, Eq)]
pub struct Refusals([u64; ErrorCode::ALL.len()]);

impl std::fmt::Debug for Refusals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl Default for Refusals {
    fn default() -> Refusals {
        Refusals([0; ErrorCode::ALL.len()])
    }
}

impl Refusals {
    fn index(code: ErrorCode) -> usize {
        ErrorCode::ALL
            .iter()
            .position(|c| *c == code)
            .expect("ErrorCode::ALL lists every code")
    }

    fn entry(&mut self, code: ErrorCode) -> &mut u64 {
        &mut self.0[Refusals::index(code)]
    }

    /// The codes that occurred, with their counts.
    pub fn iter(&self) -> impl Iterator<Item = (ErrorCode, u64)> + '_ {
        ErrorCode::ALL
            .iter()
            .zip(self.0)
            .filter(|(_, n)| *n > 0)
            .map(|(code, n)| (*code, n))
    }
}

impl Serialize for Refusals {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.iter())
    }
}

impl<'de> Deserialize<'de> for Refusals {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Refusals, D::Error> {
        let counts = HashMap::<ErrorCode, u64>::deserialize(deserializer)?;
        let mut refusals = Refusals::default();
        for (code, n) in counts {
            *refusals.entry(code) += n;
        }
        Ok(refusals)
    }
}

/// Whether a refusal is one of the purchase's own outcomes (the product is sold out, the lock
/// was lost, the wait budget ran out, a backend is down) rather than a rejected request.
pub fn is_purchase_refusal(code: ErrorCode) -> bool {
    match code {
        ErrorCode::SoldOut
        | ErrorCode::LockLost
        | ErrorCode::Busy
        | ErrorCode::BackendUnavailable
        | ErrorCode::LimitReached
        | ErrorCode::SaleNotStarted
        | ErrorCode::SaleEnded
        | ErrorCode::PurchaseTokenRequired
        | ErrorCode::PurchaseTokenMismatch
        | ErrorCode::PurchaseTokenExpired
        | ErrorCode::RateLimited
        | ErrorCode::Overloaded => true,
        ErrorCode::BadRequest
        | ErrorCode::InvalidRequest
        | ErrorCode::UnknownStrategy
        | ErrorCode::IdempotencyConflict
        | ErrorCode::PurchaseVoided
        | ErrorCode::OrderExpired
        | ErrorCode::OrderCancelled
        | ErrorCode::OrderPaid
        | ErrorCode::OrderPending
        | ErrorCode::StrategyNotOffered
        | ErrorCode::Unauthorized
        | ErrorCode::Unauthenticated
        | ErrorCode::NotYourOrder
        | ErrorCode::NotFound
        | ErrorCode::RequestTimeout
        | ErrorCode::Internal => false,
    }
}

/// `201 ×60, sold_out ×180, lock_lost ×2, no answer ×1`: every non-zero count.
impl std::fmt::Display for Outcomes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        let mut part = |what: String, n: u64| {
            if n > 0 {
                parts.push(format!("{what} ×{n}"));
            }
        };
        part("201".into(), self.created);
        part("200 replayed".into(), self.replayed);
        for (code, n) in self.refused.iter() {
            part(code.to_string(), n);
        }
        part("2xx".into(), self.served);
        for (status, n) in &self.unexpected {
            part(format!("{status} outside the contract"), *n);
        }
        part("no answer".into(), self.transport_error);
        if parts.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&parts.join(", "))
        }
    }
}

/// The body of an order of `quantity` units by `user`, with the idempotency key `request_id`.
pub fn order_request(
    user: String,
    strategy: Strategy,
    request_id: String,
    quantity: i64,
) -> OrderRequest {
    OrderRequest {
        user_id: Some(user),
        quantity,
        request_id,
        strategy: Some(strategy),
        purchase_token: None,
    }
}

/// The code of an error body in the shape the service writes it, `{"error":"<code>",
/// "message":"<text>"}`, read without parsing the JSON whole: a load's thousands of refusals
/// cost the client what the service's no-op costs it. `None` for any other shape, which the
/// full parse then judges.
fn written_shape(body: &[u8]) -> Option<ErrorCode> {
    let rest = body.strip_prefix(br#"{"error":""#)?;
    let end = rest.iter().position(|&b| b == b'"')?;
    let (code, rest) = rest.split_at(end);
    let message = rest
        .strip_prefix(br#"","message":""#)?
        .strip_suffix(br#""}"#)?;
    // The message a JSON string's content: every quote escaped, no control byte.
    let mut escaped = false;
    for &b in message {
        match (escaped, b) {
            (true, _) => escaped = false,
            (false, b'\\') => escaped = true,
            (false, b'"') => return None,
            (false, b) if b < 0x20 => return None,
            _ => {}
        }
    }
    if escaped {
        return None;
    }
    ErrorCode::ALL
        .iter()
        .copied()
        .find(|c| c.name().as_bytes() == code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_body_read_by_its_shape_gives_what_the_full_parse_gives() {
        let bodies: [&[u8]; 8] = [
            br#"{"error":"sold_out","message":"not enough stock left"}"#,
            br#"{"error":"busy","message":"say \"again\", later"}"#,
            br#"{"error":"sold_out","message":"a \\"}"#,
            // Not in the written shape: the full parse decides.
            br#"{"message":"m","error":"sold_out"}"#,
            br#"{"error":"sold_out","message":"unescaped " quote"}"#,
            br#"{"error":"no_such_code","message":"m"}"#,
            br#"{"error":"sold_out","message":"ends escaped\"}"#,
            b"{\"error\":\"sold_out\",\"message\":\"a\nb\"}",
        ];
        for body in bodies {
            let full = match serde_json::from_slice::<ErrorBody>(body) {
                Ok(b) => Answer::Refused {
                    status: 409,
                    code: b.error,
                },
                Err(_) => Answer::Unexpected { status: 409 },
            };
            assert_eq!(
                Answer::of_order(409, body),
                full,
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        assert_eq!(
            written_shape(br#"{"error":"sold_out","message":"x"}"#),
            Some(ErrorCode::SoldOut)
        );
        assert_eq!(
            written_shape(br#"{"error":"sold_out","message":"unescaped " quote"}"#),
            None
        );
    }

    #[test]
    fn an_answer_is_classified_by_status_and_documented_body() {
        let order = br#"{"order_id":1,"product_id":2,"user_id":"u","quantity":1,"strategy":"redis-lock-fenced","request_id":"r","fencing_token":7}"#;
        assert_eq!(
            Answer::of_order(201, order),
            Answer::Created {
                fencing_token: Some(7)
            }
        );
        assert_eq!(
            Answer::of_order(200, order),
            Answer::Replayed {
                fencing_token: Some(7)
            }
        );
        assert_eq!(
            Answer::of_order(503, br#"{"error":"backend_unavailable","message":"x"}"#),
            Answer::Refused {
                status: 503,
                code: ErrorCode::BackendUnavailable
            }
        );
        assert_eq!(
            Answer::of_order(409, br#"{"error":"lock_lost","message":"x"}"#),
            Answer::Refused {
                status: 409,
                code: ErrorCode::LockLost
            }
        );
        assert_eq!(
            Answer::of_order(503, b"garbage"),
            Answer::Unexpected { status: 503 }
        );
        assert_eq!(
            Answer::of_order(201, b""),
            Answer::Unexpected { status: 201 }
        );
        assert_eq!(Answer::of_request(204, b""), Answer::Served { status: 204 });
    }

    #[test]
    fn each_answer_code_is_counted_separately_in_the_json() {
        let refused = |status, code| Answer::Refused { status, code };
        let every_answer = [
            Answer::Created {
                fencing_token: None,
            },
            Answer::Replayed {
                fencing_token: None,
            },
            refused(409, ErrorCode::SoldOut),
            refused(409, ErrorCode::LockLost),
            refused(503, ErrorCode::Busy),
            refused(503, ErrorCode::BackendUnavailable),
            refused(422, ErrorCode::InvalidRequest),
            Answer::Unexpected { status: 500 },
            Answer::Transport,
        ];
        let mut outcomes = Outcomes::default();
        for answer in &every_answer {
            outcomes.count(answer);
        }
        let json = serde_json::to_value(&outcomes).unwrap();
        let codes = [
            ErrorCode::SoldOut,
            ErrorCode::LockLost,
            ErrorCode::Busy,
            ErrorCode::BackendUnavailable,
            ErrorCode::InvalidRequest,
        ];
        for name in
            codes
                .map(ErrorCode::name)
                .iter()
                .chain(&["created", "replayed", "transport_error"])
        {
            assert_eq!(json[name], 1, "`{name}` in {json}");
        }
        assert_eq!(json["unexpected"]["500"], 1, "{json}");
        assert_eq!(outcomes.total(), 9);
        assert_eq!(
            serde_json::from_value::<Outcomes>(json).unwrap(),
            outcomes,
            "read back as written"
        );
    }
}
