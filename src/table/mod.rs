//! One table's life: the rules that make it due ([`policy`]), its partitions, the pure
//! [`accumulator`] that counts, claims and settles,
//! and the catalogue of tables ([`map`]). The actix shell around the accumulator ([`actor`]) runs
//! while the table has something to do; its [`handle`] starts it, the [`supervisor`] restarts it,
//! the [`waker`] wakes idle tables' scheduled work, the [`workers`] are the threads it runs on.
//! Every table's published summary is on the [`board`]. Its durable state and small-files series
//! are `crate::model`'s (`state`, `series`), re-exported here.

pub mod accumulator;
#[cfg(feature = "service")]
pub mod actor;
pub mod board;
#[cfg(feature = "service")]
pub mod handle;
pub mod map;
pub mod partitions;
pub mod policy;
#[cfg(feature = "service")]
pub mod supervisor;
#[cfg(feature = "service")]
pub mod waker;
#[cfg(feature = "service")]
pub mod workers;

pub use crate::model::{series, state};
