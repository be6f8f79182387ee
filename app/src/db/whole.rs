//! Whole numbers between the service and either engine: MariaDB keeps ids, quantities and
//! tokens in unsigned columns, PostgreSQL has no unsigned integers. They are bound as `i64`
//! ([`signed`]) and read back as a [`Whole`], which takes MariaDB's unsigned and signed integer
//! columns and PostgreSQL's `smallint`, `integer` and `bigint` alike.

use sqlx::mysql::{MySql, MySqlTypeInfo, MySqlValueRef};
use sqlx::postgres::{PgTypeInfo, PgValueRef, Postgres};
use sqlx::{Database, Decode, Type};

type BoxDynError = Box<dyn std::error::Error + Send + Sync>;

/// An id, token or count bound as a parameter: `i64` on both engines (PostgreSQL has no
/// unsigned integers; MariaDB compares and stores a signed parameter in an unsigned column as
/// it is). Every value the service binds fits: product ids are bounded by the API
/// ([`crate::api::MAX_PRODUCT_ID`]), order ids and fencing tokens by the databases' counters.
pub fn signed(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// A whole number read from either engine: MariaDB's unsigned and signed integer columns,
/// PostgreSQL's `smallint`, `integer` and `bigint`. Read into the type the service keeps it as
/// with `#[sqlx(try_from = "Whole")]`, or by `u64::try_from`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Whole(pub i64);

impl Whole {
    /// The number as `T`, or a decoding error if it does not fit.
    pub fn get<T: TryFrom<Whole, Error = OutOfRange>>(self) -> Result<T, sqlx::Error> {
        T::try_from(self).map_err(|e| sqlx::Error::Decode(e.into()))
    }
}

/// A [`Whole`] that does not fit the type it was read into.
#[derive(Debug, thiserror::Error)]
#[error("{0} does not fit the column's type")]
pub struct OutOfRange(i64);

impl TryFrom<Whole> for u64 {
    type Error = OutOfRange;
    fn try_from(w: Whole) -> Result<u64, OutOfRange> {
        u64::try_from(w.0).map_err(|_| OutOfRange(w.0))
    }
}

impl TryFrom<Whole> for u32 {
    type Error = OutOfRange;
    fn try_from(w: Whole) -> Result<u32, OutOfRange> {
        u32::try_from(w.0).map_err(|_| OutOfRange(w.0))
    }
}

impl TryFrom<Whole> for u16 {
    type Error = OutOfRange;
    fn try_from(w: Whole) -> Result<u16, OutOfRange> {
        u16::try_from(w.0).map_err(|_| OutOfRange(w.0))
    }
}

impl Type<MySql> for Whole {
    fn type_info() -> MySqlTypeInfo {
        <i64 as Type<MySql>>::type_info()
    }

    fn compatible(ty: &MySqlTypeInfo) -> bool {
        <i64 as Type<MySql>>::compatible(ty) || <u64 as Type<MySql>>::compatible(ty)
    }
}

impl<'r> Decode<'r, MySql> for Whole {
    fn decode(value: MySqlValueRef<'r>) -> Result<Whole, BoxDynError> {
        use sqlx::ValueRef;
        let unsigned = <u64 as Type<MySql>>::compatible(&value.type_info());
        Ok(Whole(match unsigned {
            true => i64::try_from(<u64 as Decode<MySql>>::decode(value)?)?,
            false => <i64 as Decode<MySql>>::decode(value)?,
        }))
    }
}

impl Type<Postgres> for Whole {
    fn type_info() -> PgTypeInfo {
        <i64 as Type<Postgres>>::type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        <i64 as Type<Postgres>>::compatible(ty)
            || <i32 as Type<Postgres>>::compatible(ty)
            || <i16 as Type<Postgres>>::compatible(ty)
    }
}

impl<'r> Decode<'r, Postgres> for Whole {
    fn decode(value: PgValueRef<'r>) -> Result<Whole, BoxDynError> {
        use sqlx::ValueRef;
        let ty = value.type_info().into_owned();
        Ok(Whole(if <i16 as Type<Postgres>>::compatible(&ty) {
            i64::from(<i16 as Decode<Postgres>>::decode(value)?)
        } else if <i32 as Type<Postgres>>::compatible(&ty) {
            i64::from(<i32 as Decode<Postgres>>::decode(value)?)
        } else {
            <i64 as Decode<Postgres>>::decode(value)?
        }))
    }
}

/// A [`Whole`] of a column that may be `NULL` (an order's fencing token), read into an
/// `Option<u64>` with `#[sqlx(try_from = "MaybeWhole")]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaybeWhole(pub Option<Whole>);

impl<DB: Database> Type<DB> for MaybeWhole
where
    Whole: Type<DB>,
{
    fn type_info() -> DB::TypeInfo {
        <Whole as Type<DB>>::type_info()
    }

    fn compatible(ty: &DB::TypeInfo) -> bool {
        <Whole as Type<DB>>::compatible(ty)
    }
}

impl<'r, DB: Database> Decode<'r, DB> for MaybeWhole
where
    Option<Whole>: Decode<'r, DB>,
{
    fn decode(value: <DB as Database>::ValueRef<'r>) -> Result<MaybeWhole, BoxDynError> {
        Ok(MaybeWhole(<Option<Whole> as Decode<'r, DB>>::decode(
            value,
        )?))
    }
}

impl TryFrom<MaybeWhole> for Option<u64> {
    type Error = OutOfRange;
    fn try_from(w: MaybeWhole) -> Result<Option<u64>, OutOfRange> {
        w.0.map(u64::try_from).transpose()
    }
}
