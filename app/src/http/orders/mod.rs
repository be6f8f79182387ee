//! `POST /api/products/{id}/orders` and `GET /api/products/{id}/orders/{request_id}`.
//!
//! A purchase is admitted first ([`admit`]): its body, the strategy, and the product's rules as
//! this instance remembers them ([`crate::product_memory`]) — the sale window, the purchase token,
//! the per-user limit of one click, and whether the product is known to be sold out. Whatever is
//! refused there is refused from memory, at the cost of a no-op — but for an expired purchase
//! token, refused once its purchase is read not to exist. A product sold first come gives the click
//! its place in its queue next ([`turn`]): a click behind the units is refused there, one with a
//! place waits for room instead of being refused it. What is admitted runs its strategy in a task
//! of its own, so that a buyer who hangs up never cancels a purchase half-way; a duplicate is
//! answered with its original order.

mod admit;
mod life;
mod status;
mod turn;

use std::sync::Arc;
use std::time::Instant;

use axum::Json;
use std::net::SocketAddr;

use axum::body::{Body, Bytes};
use axum::extract::rejection::PathRejection;
use axum::extract::{ConnectInfo, Path, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::MAX_BODY;

use crate::api::{
    ErrorBody, ErrorCode, OrderRequest, OrderResponse, OrderState, OrderStatus, Strategy,
};
use crate::db::orders::{self, Order, OrderState as Stored};
use crate::error::ApiError;
use crate::first_come::Ticket;
use crate::metrics::{Observation, Outcome, Stage};
use crate::overload::Place;
use crate::product_memory::Epoch;
use crate::state::AppState;
use crate::strategy::{Purchase, PurchaseError, PurchaseStats, Purchased, StockStrategy};

pub use admit::HOLD_HEADER;
pub(super) use admit::within_sale;
pub use life::{__path_cancel, __path_expire, __path_pay, UNCHECKED_HEADER, cancel, expire, pay};
pub use status::{__path_status, status};

impl TryFrom<Order> for OrderResponse {
    type Error = ApiError;

    fn try_from(o: Order) -> Result<OrderResponse, ApiError> {
        let strategy = o
            .strategy
            .parse::<Strategy>()
            .map_err(|e| ApiError::Internal(format!("order {} names {e}", o.order_id).into()))?;
        let stage = o.state().stage().unwrap_or_default();
        Ok(OrderResponse {
            order_id: o.order_id,
            product_id: o.product_id,
            user_id: o.user_id,
            quantity: o.quantity,
            strategy,
            request_id: o.request_id,
            fencing_token: o.fencing_token,
            stage,
        })
    }
}

/// A successful answer to a purchase.
#[derive(Debug)]
pub enum Success {
    /// `201`: the order is recorded.
    Created(OrderResponse),
    /// `200`: the original order of this request id.
    Replayed(OrderResponse),
    /// `202`: the units are taken and the order is queued; `Location` tells where to ask.
    Accepted(OrderStatus),
}

impl IntoResponse for Success {
    fn into_response(self) -> Response {
        match self {
            Success::Created(order) => (StatusCode::CREATED, Json(order)).into_response(),
            Success::Replayed(order) => (StatusCode::OK, Json(order)).into_response(),
            Success::Accepted(status) => {
                let location = format!(
                    "/api/products/{}/orders/{}?user_id={}",
                    status.product_id,
                    encode_segment(&status.request_id),
                    encode_segment(&status.user_id)
                );
                let mut response = (StatusCode::ACCEPTED, Json(status)).into_response();
                if let Ok(value) = HeaderValue::from_str(&location) {
                    response.headers_mut().insert(header::LOCATION, value);
                }
                response
            }
        }
    }
}

type Answer = Result<Success, ApiError>;

/// Buys `quantity` units through a strategy for the buyer of the buyer token (or, on a server
/// without a buyer key, of the body's `user_id`); idempotent per buyer and `request_id`.
#[utoipa::path(post, path = "/api/products/{id}/orders", tag = "orders",
    params(
        ("id" = i64, Path, description = "Product id (0 to 2^63 − 1)", minimum = 0),
        ("X-Seckill-Hold-Ms" = Option<u64>, Header, minimum = 0, maximum = 120_000,
            description = "Milliseconds to pause inside the critical section (listed only when \
                           the server runs with --allow-fault-injection; ignored otherwise)")),
    request_body = OrderRequest,
    responses(
        (status = 201, description = "Order created", body = OrderResponse),
        (status = 200, description = "Replay: the original order of this request_id", body = OrderResponse),
        (status = 202, description = "Accepted, not yet placed (`redis-lua-stream`): the units are taken and the order is queued; `GET` the `Location` for its state", body = OrderStatus,
            headers(("Location" = String, description = "`/api/products/{id}/orders/{request_id}?user_id={user_id}`"))),
        (status = 400, description = "`bad_request`: malformed JSON, id or header", body = ErrorBody),
        (status = 401, description = "`unauthenticated`: no valid buyer token (when the server has a buyer key), or `unauthorized`: the fault-injection header without the admin token (when one is set)", body = ErrorBody),
        (status = 403, description = "`strategy_not_offered`: this deployment does not offer the strategy, or the product is not sold by it; `not_your_order`: the buyer token names another buyer than the body's `user_id`; `purchase_token_required`: the product requires a purchase token and the purchase carries none, or not this buyer's for this sale; `purchase_token_mismatch`: the token admits one purchase, under another `request_id`; or `purchase_token_expired`: the token expired and its purchase was not made", body = ErrorBody),
        (status = 404, description = "`not_found`: unknown product", body = ErrorBody),
        (status = 408, description = "`request_timeout`: the body had not all come by its deadline (`--body-read-timeout-ms`); the connection is closed", body = ErrorBody),
        (status = 409, description = "`sold_out` (for a product sold first come, also: every unit is promised to an earlier click), `limit_reached` (the buyer would hold more than the product's per-user limit, or, for a product sold first come, the buyer's clicks being served already hold it), `sale_not_started`, `sale_ended`, `lock_lost` (a fenced write was refused), `idempotency_conflict` (this buyer used the request id for this product with another quantity or strategy), or `purchase_voided` (a reconciliation fenced this purchase out; nothing was bought)", body = ErrorBody),
        (status = 422, description = "`invalid_request` (the body breaks the schema: a missing field — `user_id` too, when the server has no buyer key —, an unknown one, a value out of range), or `unknown_strategy`", body = ErrorBody),
        (status = 429, description = "`rate_limited`: this buyer or address is past its rate; retry after Retry-After", body = ErrorBody,
            headers(("Retry-After" = u32, description = "Seconds to wait"))),
        (status = 503, description = "`busy` (retry after Retry-After; for a product sold first come, also: its click found no room before its deadline and gave its place up, or it was sent again while its first is being served), `overloaded` (refused at once: the service works on as many purchases as it may, or the queue the purchase would wait in — `batched`'s, `redis-lua-stream`'s stream — is full), or `backend_unavailable` (a backend out of reach, or Redis lost the product's stock: refused until a reconcile)", body = ErrorBody,
            headers(("Retry-After" = u32, description = "Seconds to wait")))))]
pub async fn create(
    State(state): State<AppState>,
    path: Result<Path<u64>, PathRejection>,
    // The request itself, not its headers and extensions apart: those extractors clone them,
    // which a refusal from memory would pay for on every click.
    request: Request,
) -> Answer {
    let started = Instant::now();
    state.metrics.purchase_received();
    let product_id = super::product_id(path)?;
    let (parts, body) = request.into_parts();
    let body = read_body(body).await?;
    let mut order = admit::parse(&body)?;
    order.check(state.settings.max_quantity)?;
    let named = order.user_id.take();
    let buyer = super::identity::authenticate(&state.settings, &parts.headers, named)?;
    let peer = parts.extensions.get::<ConnectInfo<SocketAddr>>();
    super::rates::count(&state, &buyer, peer)?;
    if !state.membership.ready() {
        return Err(crate::error::ApiError::out_of_the_cluster());
    }
    if !state.semi_sync.acknowledged() {
        return Err(crate::error::ApiError::not_replicated());
    }
    let (admitted, recalled) =
        admit::admit(&state, &parts.headers, product_id, buyer, order, started).await?;
    if recalled.refused {
        observe(&state, admitted.strategy, None, ErrorCode::SoldOut, started);
        return Err(ApiError::SoldOut);
    }
    let first_come = recalled.known.is_some_and(|k| k.rules.first_come);
    let purchase = admitted.into_purchase();
    // Not carried across the purchase's wait: its headers and extensions are read.
    drop(parts);
    let strategy = state.registry.get(purchase.strategy).clone();
    let epoch = recalled.epoch;
    // Boxed, so that what a refusal from memory moves is no larger than its own path needs.
    Box::pin(async move {
        let ticket = match first_come {
            true => turn::take(&state, &purchase, started).await?,
            false => None,
        };
        place(state, strategy, Arc::new(purchase), epoch, started, ticket).await
    })
    .await
}

/// The body of a purchase, at most [`MAX_BODY`] bytes. Its frames are kept as they come and
/// copied once, into one buffer, when the last has come: a body a byte a frame costs what it
/// weighs, not its square. A few dozen bytes come as one frame, kept as it came: no copy.
async fn read_body(body: Body) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(body, MAX_BODY).await.map_err(|e| {
        let what = format!("the body could not be read (at most {MAX_BODY} bytes): {e}");
        ApiError::unreadable_body(&e, what)
    })
}

/// Runs an admitted purchase through its strategy, if the admission limiter lets it in; one
/// with a first-come `ticket` waits for room until its deadline, and settles its ticket when
/// answered.
async fn place(
    state: AppState,
    strategy: Arc<dyn StockStrategy>,
    purchase: Arc<Purchase>,
    epoch: Epoch,
    started: Instant,
    ticket: Option<Ticket>,
) -> Answer {
    let timeout = state.settings.request_timeout;
    // Counted from the headers: the time the body took to come is part of the buyer's wait.
    let deadline = tokio::time::Instant::from_std(started + timeout);
    let admitted = match ticket {
        None => state.limiter.admit(purchase.strategy, &*strategy),
        Some(_) => {
            (state.limiter)
                .admit_in_turn(purchase.strategy, &*strategy, deadline)
                .await
        }
    };
    let Some(place) = admitted else {
        let refused = match ticket {
            None => ApiError::Overloaded,
            Some(ticket) => {
                turn::settle(ticket, false).await;
                ApiError::Busy(format!(
                    "no room for this purchase within {timeout:?}; its place in the queue is \
                     given to the next: send it again"
                ))
            }
        };
        let code = refused.code();
        observe(
            &state,
            purchase.strategy,
            Some(&purchase.stats),
            code,
            started,
        );
        return Err(refused);
    };
    // The purchase runs to its end whatever happens to this request: hyper drops the handler
    // when the buyer hangs up, and units taken outside a transaction (Redis) would stay taken
    // without an order. A task of its own is not dropped with the handler, and keeps its place
    // among the purchases in flight until it ends.
    let work = tokio::spawn(inside(
        state, strategy, purchase, place, ticket, epoch, started,
    ));
    match tokio::time::timeout_at(deadline, work).await {
        Ok(answer) => answer.unwrap_or_else(|e| {
            Err(ApiError::Internal(
                format!("the purchase task failed: {e}").into(),
            ))
        }),
        Err(_) => Err(ApiError::Busy(format!(
            "no answer within {timeout:?}; the purchase goes on and may still be made: retry \
             with the same request id, or ask for its status"
        ))),
    }
}

/// An admitted purchase, from its place among those in flight to its answer: run through its
/// strategy, observed, its first-come ticket settled, a sold-out answer remembered.
async fn inside(
    state: AppState,
    strategy: Arc<dyn StockStrategy>,
    purchase: Arc<Purchase>,
    mut place: Place,
    ticket: Option<Ticket>,
    epoch: Epoch,
    started: Instant,
) -> Answer {
    let _in_flight = state.metrics.purchase_started();
    let inside = Instant::now();
    purchase.stats.time(Stage::Admission, inside - started);
    let answer = run(&state, &strategy, &purchase).await;
    purchase.stats.time(Stage::Strategy, inside.elapsed());
    if let Err(ApiError::Overloaded) = answer {
        place.turned_away();
    }
    let outcome = match &answer {
        Ok(Success::Created(_)) => Outcome::Created,
        Ok(Success::Replayed(_)) => Outcome::Replayed,
        Ok(Success::Accepted(_)) => Outcome::Accepted,
        Err(e) => Outcome::Refused(e.code()),
    };
    observe(
        &state,
        purchase.strategy,
        Some(&purchase.stats),
        outcome,
        started,
    );
    if let Some(ticket) = ticket {
        turn::settle(ticket, turn::kept(&answer)).await;
    }
    // Boxed: its read of the winners, 20 KB of future, would otherwise be carried by
    // every purchase's task, and moved whole as the task is spawned.
    if let Err(ApiError::SoldOut) = answer
        && let Err(e) = Box::pin(state.memory.learn_sold_out(purchase.product_id, epoch)).await
    {
        tracing::warn!(error = %e, "could not remember a sold-out product");
    }
    answer
}

/// The strategy's purchase, run again while the database rolls its transaction back, up to
/// `--rollback-retries` times: a rolled-back purchase did nothing (the strategy has given back
/// whatever it took outside the transaction), so another attempt buys at most once.
async fn purchase_retrying_rollbacks(
    state: &AppState,
    strategy: &Arc<dyn StockStrategy>,
    purchase: &Purchase,
) -> Result<Purchased, PurchaseError> {
    let mut retries = 0;
    loop {
        match strategy.purchase(purchase).await {
            Err(PurchaseError::RolledBack(_)) if retries < state.settings.rollback_retries => {
                retries += 1;
                purchase.stats.add_retry();
            }
            answer => return answer,
        }
    }
}

/// Counts a purchase's answer; `stats` is `None` for one refused before any strategy ran.
fn observe(
    state: &AppState,
    strategy: Strategy,
    stats: Option<&PurchaseStats>,
    outcome: impl Into<Outcome>,
    started: Instant,
) {
    state.metrics.observe(Observation {
        strategy,
        outcome: outcome.into(),
        latency: started.elapsed(),
        lock_wait: stats.and_then(PurchaseStats::lock_wait),
        retries: stats.map_or(0, PurchaseStats::retries),
        under_lock: stats.and_then(PurchaseStats::under_lock),
        stages: stats.map_or([None; Stage::COUNT], PurchaseStats::stages),
    });
}

async fn run(state: &AppState, strategy: &Arc<dyn StockStrategy>, purchase: &Purchase) -> Answer {
    match purchase_retrying_rollbacks(state, strategy, purchase).await {
        Ok(Purchased::Placed(placed)) => Ok(Success::Created(OrderResponse {
            order_id: placed.order_id,
            product_id: purchase.product_id,
            user_id: purchase.user_id.clone(),
            quantity: purchase.quantity,
            strategy: purchase.strategy,
            request_id: purchase.request_id.clone(),
            fencing_token: placed.fencing_token,
            stage: crate::api::OrderStage::Reserved,
        })),
        Ok(Purchased::Accepted) => Ok(Success::Accepted(OrderStatus {
            request_id: purchase.request_id.clone(),
            product_id: purchase.product_id,
            user_id: purchase.user_id.clone(),
            state: OrderState::Pending,
            order: None,
            pay_by: None,
        })),
        Err(PurchaseError::Duplicate) => replay(state, purchase).await?.ok_or_else(|| {
            ApiError::Internal(
                "duplicate purchase, but its order is gone (product reset meanwhile?)".into(),
            )
        }),
        // A full queue took nothing and looks nothing up, as the door's refusal does not: a
        // retry of a click that did buy is told to come back, and is answered its order then.
        Err(PurchaseError::Overloaded) => Err(ApiError::Overloaded),
        // Any other refusal may answer the retry of a click that did buy — its first answer
        // lost, or a 503 after a commit whose outcome the server could not know — and the
        // strategy gave up before reaching the order insert. Look the order up before refusing.
        Err(e) => match replay(state, purchase).await {
            Ok(Some(original)) => Ok(original),
            Err(definite @ (ApiError::IdempotencyConflict(_) | ApiError::PurchaseVoided)) => {
                Err(definite)
            }
            Ok(None) | Err(_) => Err(e.into()),
        },
    }
}

/// The original order of this purchase (`200`), if there is one. The same buyer's request id
/// used for this product with another quantity or strategy is a conflict; a purchase a
/// reconciliation voided is refused as such.
async fn replay(state: &AppState, purchase: &Purchase) -> Result<Option<Success>, ApiError> {
    let Some(original) = orders::find(&state.pool, purchase.key()).await? else {
        return Ok(None);
    };
    if original.state() == Stored::Voided {
        return Err(ApiError::PurchaseVoided);
    }
    let same =
        original.quantity == purchase.quantity && original.strategy == purchase.strategy.name();
    if !same {
        return Err(ApiError::IdempotencyConflict(format!(
            "request id `{}` was already used by this buyer for product {} with quantity {} \
             through strategy `{}`; use a new request id",
            purchase.request_id, original.product_id, original.quantity, original.strategy
        )));
    }
    Ok(Some(Success::Replayed(original.try_into()?)))
}

/// `value` as one URL path segment: unreserved characters as they are, every other byte
/// percent-encoded.
fn encode_segment(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(byte as char)
            }
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(frames: Vec<Bytes>) -> Body {
        Body::from_stream(futures::stream::iter(
            frames.into_iter().map(Ok::<_, std::convert::Infallible>),
        ))
    }

    #[tokio::test]
    async fn a_body_a_byte_a_frame_is_gathered_whole() {
        let order = br#"{"user_id": "u", "quantity": 1, "request_id": "r"}"#.repeat(300);
        let body = frames(order.iter().map(|&b| Bytes::from(vec![b])).collect());
        assert_eq!(read_body(body).await.expect("read"), order);
    }

    #[tokio::test]
    async fn a_body_of_one_frame_is_kept_as_it_came() {
        let frame = Bytes::from(br#"{"user_id": "u", "quantity": 1, "request_id": "r"}"#.to_vec());
        let read = read_body(frames(vec![frame.clone()])).await.expect("read");
        assert_eq!(read.as_ptr(), frame.as_ptr(), "copied");
    }

    #[test]
    #[allow(unreachable_code, clippy::diverging_sub_expression)]
    fn a_purchases_future_is_small_to_move_its_rare_paths_boxed() {
        use crate::future_size;
        // axum and tower move a handler's future whole as they wrap it, for every request a
        // refusal from memory answers too; a database read awaited inline adds 20 KB.
        let create = future_size(|| create(todo!(), todo!(), todo!()));
        let place = future_size(|| place(todo!(), todo!(), todo!(), todo!(), todo!(), todo!()));
        let inside = future_size(|| {
            inside(
                todo!(),
                todo!(),
                todo!(),
                todo!(),
                todo!(),
                todo!(),
                todo!(),
            )
        });
        assert!(create <= 4096, "create's future is {create} bytes");
        assert!(place <= 4096, "place's future is {place} bytes");
        assert!(inside <= 4096, "a purchase's task is {inside} bytes");
    }

    #[tokio::test]
    async fn a_body_past_the_bound_is_refused() {
        let body = frames(vec![
            Bytes::from(vec![b' '; MAX_BODY]),
            Bytes::from_static(b" "),
        ]);
        assert!(matches!(
            read_body(body).await,
            Err(ApiError::BadRequest(_))
        ));
    }
}
