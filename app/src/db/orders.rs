//! Order rows: insert (the idempotency arbiter), look-up by purchase, and the voiding that
//! fences a lost purchase out. An order's life after its insert (pay, cancel, expire, give its
//! units back) is in [`super::order_life`].
//!
//! A purchase is named by its [`PurchaseKey`]: the product, the buyer and the buyer's request
//! id, compared byte for byte (the columns' `utf8mb4_nopad_bin`). The unique key
//! `orders_purchase` makes one order per purchase, whoever inserts it.

use super::engine::{Conn, Db, MaybeWhole, Sql, Whole, each_engine, execute, signed, sql};

/// The name of one purchase: the same click of the same buyer on the same product.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PurchaseKey<'a> {
    pub product_id: u64,
    pub user_id: &'a str,
    pub request_id: &'a str,
}

/// An order about to be written.
#[derive(Debug, Clone, Copy)]
pub struct NewOrder<'a> {
    pub product_id: u64,
    pub user_id: &'a str,
    pub quantity: u32,
    /// The strategy's wire name.
    pub strategy: &'a str,
    pub request_id: &'a str,
    pub fencing_token: Option<u64>,
    /// How long the buyer has to pay (the product's payment window), from the insert, by the
    /// database clock.
    pub pay_within: std::time::Duration,
}

/// What became of a purchase's order row (the `state` column; see the migration
/// `order_states` for the life it describes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OrderState {
    /// Holds its units until paid, cancelled or expired.
    Reserved,
    /// Holds its units for good.
    Paid,
    /// Expired; its units are on their way back to a home outside the database.
    Expiring,
    /// Cancelled; its units are on their way back to a home outside the database.
    Cancelling,
    /// Expired; its units are back home.
    Expired,
    /// Cancelled; its units are back home.
    Cancelled,
    /// `reconcile` presumed the purchase lost and fenced it out: it holds no units.
    Voided,
}

/// An order as stored.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Order {
    #[sqlx(try_from = "Whole")]
    pub order_id: u64,
    #[sqlx(try_from = "Whole")]
    pub product_id: u64,
    pub user_id: String,
    #[sqlx(try_from = "Whole")]
    pub quantity: u32,
    pub strategy: String,
    pub request_id: String,
    #[sqlx(try_from = "MaybeWhole")]
    pub fencing_token: Option<u64>,
    state: String,
    /// The payment deadline, in milliseconds since the Unix epoch.
    pub pay_by_ms: Option<i64>,
}

impl OrderState {
    pub(crate) fn of(column: &str) -> OrderState {
        match column {
            "reserved" => OrderState::Reserved,
            "expiring" => OrderState::Expiring,
            "cancelling" => OrderState::Cancelling,
            "expired" => OrderState::Expired,
            "cancelled" => OrderState::Cancelled,
            "voided" => OrderState::Voided,
            // `paid`, and the final orders of before (`placed`, migrated to `paid`).
            _ => OrderState::Paid,
        }
    }

    /// The value of the `state` column.
    pub fn name(self) -> &'static str {
        match self {
            OrderState::Reserved => "reserved",
            OrderState::Paid => "paid",
            OrderState::Expiring => "expiring",
            OrderState::Cancelling => "cancelling",
            OrderState::Expired => "expired",
            OrderState::Cancelled => "cancelled",
            OrderState::Voided => "voided",
        }
    }

    /// Whether an order in this state holds its units (reserved or paid).
    pub fn holds_units(self) -> bool {
        matches!(self, OrderState::Reserved | OrderState::Paid)
    }

    /// Where the order stands for its buyer (`None`: voided, no order to speak of). An order
    /// whose units are on their way back is expired or cancelled already.
    pub fn stage(self) -> Option<crate::api::OrderStage> {
        use crate::api::OrderStage;
        match self {
            OrderState::Reserved => Some(OrderStage::Reserved),
            OrderState::Paid => Some(OrderStage::Paid),
            OrderState::Expiring | OrderState::Expired => Some(OrderStage::Expired),
            OrderState::Cancelling | OrderState::Cancelled => Some(OrderStage::Cancelled),
            OrderState::Voided => None,
        }
    }
}

impl Order {
    pub fn state(&self) -> OrderState {
        OrderState::of(&self.state)
    }
}

/// The columns of [`Order`], for its `SELECT`s, with the payment deadline in milliseconds
/// since the Unix epoch as `$pay_by_ms` computes it, for `concat!`.
macro_rules! order_columns {
    (mysql) => {
        order_columns!("CAST(FLOOR(UNIX_TIMESTAMP(pay_by) * 1000) AS SIGNED)")
    };
    (postgres) => {
        order_columns!("CAST(FLOOR(EXTRACT(EPOCH FROM pay_by) * 1000) AS BIGINT)")
    };
    ($pay_by_ms:literal) => {
        concat!(
            "id AS order_id, product_id, user_id, quantity, strategy, request_id, fencing_token, \
             state, ",
            $pay_by_ms,
            " AS pay_by_ms"
        )
    };
}

/// Microseconds of `d`, as the `INTERVAL … MICROSECOND` of a deadline.
pub(crate) fn micros(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// A payment deadline, `pay_within` (a parameter, in microseconds) from now by the database
/// clock: the text before the parameter and after it.
pub(crate) const PAY_BY: [Sql; 2] = [
    Sql {
        mysql: "NOW(6) + INTERVAL ",
        postgres: "clock_timestamp() + INTERVAL '1 microsecond' * ",
    },
    Sql {
        mysql: " MICROSECOND",
        postgres: "",
    },
];

/// Inserts `order` and returns its id. An order of the same purchase fails with the
/// unique-constraint error of `orders_purchase` (the caller's transaction must then roll back).
pub async fn insert(conn: Conn<'_>, order: &NewOrder<'_>) -> Result<u64, sqlx::Error> {
    const INSERT: Sql = sql!(
        mysql: "INSERT INTO orders (product_id, user_id, quantity, strategy, request_id, \
                                    fencing_token, pay_by) \
                VALUES (?, ?, ?, ?, ?, ?, NOW(6) + INTERVAL ? MICROSECOND) RETURNING id",
        postgres: "INSERT INTO orders (product_id, user_id, quantity, strategy, request_id, \
                                       fencing_token, pay_by) \
                   VALUES (?, ?, ?, ?, ?, ?, clock_timestamp() + INTERVAL '1 microsecond' * ?) \
                   RETURNING id",
    );
    let id: Whole = each_engine!(conn, |c, e| sqlx::query_scalar(e.sql(INSERT))
        .bind(signed(order.product_id))
        .bind(order.user_id)
        .bind(i64::from(order.quantity))
        .bind(order.strategy)
        .bind(order.request_id)
        .bind(order.fencing_token.map(signed))
        .bind(micros(order.pay_within))
        .fetch_one(c)
        .await)?;
    id.get()
}

/// Inserts `orders` (all of one product) with one multi-row statement and returns each new
/// order's id with its buyer and request id (`INSERT … RETURNING`: the ids of one multi-row
/// insert need not be consecutive). An order of the same purchase fails the whole statement,
/// like [`insert`].
pub async fn insert_all(
    conn: Conn<'_>,
    orders: &[NewOrder<'_>],
) -> Result<Vec<(u64, String, String)>, sqlx::Error> {
    let rows: Vec<(Whole, String, String)> = each_engine!(conn, |c, e| {
        let mut insert = e.builder(
            "INSERT INTO orders (product_id, user_id, quantity, strategy, request_id, \
                                 fencing_token, pay_by) ",
        );
        insert.push_values(orders, |mut row, order| {
            row.push_bind(signed(order.product_id))
                .push_bind(order.user_id)
                .push_bind(i64::from(order.quantity))
                .push_bind(order.strategy)
                .push_bind(order.request_id)
                .push_bind(order.fencing_token.map(signed))
                .push(e.sql(PAY_BY[0]))
                .push_bind_unseparated(micros(order.pay_within))
                .push_unseparated(e.sql(PAY_BY[1]));
        });
        insert.push(" RETURNING id, user_id, request_id");
        insert.build_query_as().fetch_all(c).await
    })?;
    rows.into_iter()
        .map(|(id, user, request)| Ok((id.get()?, user, request)))
        .collect()
}

/// Which of the purchases `(user id, request id)` of `product_id` already have an order
/// (plain, non-locking read).
pub async fn existing(
    conn: Conn<'_>,
    product_id: u64,
    purchases: &[(&str, &str)],
) -> Result<Vec<(String, String)>, sqlx::Error> {
    each_engine!(conn, |c, e| {
        let mut select = e.builder("SELECT user_id, request_id FROM orders WHERE product_id = ");
        select.push_bind(signed(product_id));
        select.push(" AND (user_id, request_id) IN (");
        let mut keys = select.separated(", ");
        for (user, request) in purchases {
            keys.push("(");
            keys.push_bind_unseparated(*user);
            keys.push_unseparated(", ");
            keys.push_bind_unseparated(*request);
            keys.push_unseparated(")");
        }
        select.push(")");
        select.build_query_as().fetch_all(c).await
    })
}

/// The order of the purchase `key`, if any (voided ones included: see [`Order::state`]).
pub async fn find(db: &Db, key: PurchaseKey<'_>) -> Result<Option<Order>, sqlx::Error> {
    macro_rules! find_text {
        ($engine:ident) => {
            concat!(
                "SELECT ",
                order_columns!($engine),
                " FROM orders WHERE product_id = ? AND user_id = ? AND request_id = ?"
            )
        };
    }
    const FIND: Sql = sql!(mysql: find_text!(mysql), postgres: find_text!(postgres));
    each_engine!(db.pool(), |c, e| sqlx::query_as(e.sql(FIND))
        .bind(signed(key.product_id))
        .bind(key.user_id)
        .bind(key.request_id)
        .fetch_optional(c)
        .await)
}

/// The buyer, request id and state of each of the product's order rows.
pub async fn purchases_of(
    db: &Db,
    product_id: u64,
) -> Result<Vec<(String, String, OrderState)>, sqlx::Error> {
    const PURCHASES: Sql =
        sql!("SELECT user_id, request_id, state FROM orders WHERE product_id = ?");
    let rows: Vec<(String, String, String)> =
        each_engine!(db.pool(), |c, e| sqlx::query_as(e.sql(PURCHASES))
            .bind(signed(product_id))
            .fetch_all(c)
            .await)?;
    Ok(rows
        .into_iter()
        .map(|(user, request, state)| (user, request, OrderState::of(&state)))
        .collect())
}

/// One of a product's orders as [`states_of`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProductOrder {
    pub order_id: u64,
    pub user_id: String,
    pub request_id: String,
    pub quantity: u32,
    pub strategy: String,
    pub state: OrderState,
}

/// The id, buyer, request id, quantity, strategy and state of each of the product's order rows.
pub async fn states_of(db: &Db, product_id: u64) -> Result<Vec<ProductOrder>, sqlx::Error> {
    const STATES: Sql = sql!(
        "SELECT id, user_id, request_id, quantity, strategy, state FROM orders \
         WHERE product_id = ?"
    );
    let rows: Vec<(Whole, String, String, Whole, String, String)> =
        each_engine!(db.pool(), |c, e| sqlx::query_as(e.sql(STATES))
            .bind(signed(product_id))
            .fetch_all(c)
            .await)?;
    rows.into_iter()
        .map(
            |(order_id, user_id, request_id, quantity, strategy, state)| {
                Ok(ProductOrder {
                    order_id: order_id.get()?,
                    user_id,
                    request_id,
                    quantity: quantity.get()?,
                    strategy,
                    state: OrderState::of(&state),
                })
            },
        )
        .collect()
}

/// Fences the purchase out: writes its name as a voided order, which holds no units and makes
/// any later insert of that purchase fail. Returns `false` if the purchase has an order row
/// already (it was placed meanwhile: not lost after all).
pub async fn void(db: &Db, order: &NewOrder<'_>) -> Result<bool, sqlx::Error> {
    const VOID: Sql = sql!(
        "INSERT INTO orders (product_id, user_id, quantity, strategy, request_id, state) \
         VALUES (?, ?, ?, ?, ?, 'voided')"
    );
    let inserted = execute!(
        db.pool(),
        VOID,
        signed(order.product_id),
        order.user_id,
        i64::from(order.quantity),
        order.strategy,
        order.request_id
    );
    match inserted {
        Ok(_) => Ok(true),
        Err(e) if super::errors::classify(&e) == super::errors::DbFailure::Duplicate => Ok(false),
        Err(e) => Err(e),
    }
}

/// The units of `product` that came back home since its reset: those of its orders that
/// expired or were cancelled and have arrived (an order on its way, `expiring` or
/// `cancelling`, is not counted until its units are home).
pub async fn units_back_home(db: &Db, product: u64) -> Result<i64, sqlx::Error> {
    macro_rules! back_text {
        ($int:literal) => {
            concat!(
                "SELECT CAST(COALESCE(SUM(quantity), 0) AS ",
                $int,
                ") FROM orders \
                 WHERE product_id = ? AND state IN ('expired', 'cancelled')"
            )
        };
    }
    const BACK: Sql = sql!(mysql: back_text!("SIGNED"), postgres: back_text!("BIGINT"));
    each_engine!(db.pool(), |c, e| sqlx::query_scalar(e.sql(BACK))
        .bind(signed(product))
        .fetch_one(c)
        .await)
}
