//! The dead-letter record, its states and the values the store exchanges, one file per part:
//!
//! - `row`: the stored row ([`DeadLetter`]), its id, [`Status`] and [`DeadReason`];
//! - `payload`: the stored event ([`Payload`]), the size limit and [`Truncation`];
//! - `source`: where an event came from ([`SourceMeta`]);
//! - `parking`: a new letter ([`NewDeadLetter`]) and what parking it did ([`Parked`]);
//! - `claim`: the claim/settle cycle ([`ClaimRequest`], [`ClaimCap`], [`Claimed`], [`Lease`],
//!   [`Settlement`], [`SettleReport`]);
//! - `filter`: which rows a read applies to ([`ListFilter`], [`Order`]);
//! - `operator`: what operators read besides rows ([`AttemptRecord`], [`AuditEntry`],
//!   [`AuditNote`], [`StatsRow`], [`FailureGroup`], [`RetrierHeartbeat`]).
//!
//! The crate root, `store` and `admin` re-export them; nothing outside names these files.

mod circuit;
mod claim;
mod filter;
mod operator;
mod parking;
mod payload;
mod row;
mod source;

pub use circuit::{Circuit, CircuitLogEntry, CircuitState, CircuitView, CircuitWrite, Circuits, StoreId};
pub use claim::{ClaimCap, ClaimRequest, Claimed, Lease, SettleReport, Settlement};
pub use filter::{ListFilter, Order};
pub(crate) use operator::host_name;
pub use operator::{
    AttemptRecord, AuditEntry, AuditNote, Capacity, Change, Detail, FailureGroup, RetrierHeartbeat, StatsRow,
};
pub use parking::{NewDeadLetter, Parked};
pub(crate) use payload::json_len;
pub use payload::{DEFAULT_MAX_PAYLOAD_BYTES, Payload, TOO_LARGE_PREVIEW_BYTES, Truncation, hex, unhex};
pub use row::{DeadLetter, DeadReason, DlqId, Status};
pub use source::SourceMeta;
