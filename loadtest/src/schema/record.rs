//! One record per strategy: what the strategy is, once; its flash sale and its loops; and what
//! each phase measured of it, by the phase's name. Readers take a strategy's figures with the
//! strategy they belong to, as a view ([`Sold`], [`Of`]), so that no result repeats whose it is.

use std::ops::Deref;

use app::api::StrategyInfo;
use serde::{Deserialize, Serialize};

use super::{ByPhase, Loops, SaleResult};

/// Everything a run measured of one strategy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StrategyReport {
    pub strategy: StrategyInfo,
    /// Its flash sale (absent from a run of the phases before the sale alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sale: Option<SaleResult>,
    /// Its closed and open loops (absent from a run of the phases before the sale alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loops: Option<Loops>,
    /// What each phase that measured it found, under the phase's name; a phase that did not
    /// measure it is absent.
    #[serde(default, skip_serializing_if = "ByPhase::is_empty")]
    pub phases: ByPhase,
    /// Each phase that could not measure it, and why: the run went on without its figures.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unmeasured: Vec<Unmeasured>,
}

/// A phase that failed for one strategy: its figures are missing, the rest of the run is not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Unmeasured {
    /// The phase's name.
    pub phase: String,
    /// What failed, with its causes.
    pub error: String,
}

impl StrategyReport {
    /// A record of `strategy` with nothing measured yet.
    pub fn of(strategy: StrategyInfo) -> StrategyReport {
        StrategyReport {
            strategy,
            sale: None,
            loops: None,
            phases: ByPhase::default(),
            unmeasured: Vec::new(),
        }
    }

    /// Its sale and loops, if it was sold and looped.
    pub fn sold(&self) -> Option<Sold<'_>> {
        Some(Sold {
            strategy: &self.strategy,
            sale: self.sale.as_ref()?,
            loops: self.loops.as_ref()?,
        })
    }
}

/// A strategy's sale and loops, with the strategy they belong to. Reads as its [`Loops`].
#[derive(Debug, Clone, Copy)]
pub struct Sold<'a> {
    pub strategy: &'a StrategyInfo,
    pub sale: &'a SaleResult,
    pub loops: &'a Loops,
}

impl Deref for Sold<'_> {
    type Target = Loops;

    fn deref(&self) -> &Loops {
        self.loops
    }
}

/// One phase's result for a strategy, with the strategy it belongs to. Reads as the result.
#[derive(Debug, PartialEq)]
pub struct Of<'a, T> {
    pub strategy: &'a StrategyInfo,
    pub result: &'a T,
}

impl<T> Clone for Of<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Of<'_, T> {}

impl<T> Deref for Of<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        self.result
    }
}
