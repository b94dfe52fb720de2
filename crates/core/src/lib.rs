//! Shared vocabulary of brine: values, rows, keys, schemas, identifiers and
//! errors. Every other crate speaks in these types; nothing here knows about
//! locking, storage or the network.

pub mod access;
pub mod error;
pub mod ids;
pub mod rowid;
pub mod schema;
pub mod timestamp;
pub mod value;

pub use access::{Access, LockNeed, LockTarget};
pub use error::{AbortCause, Error, Result};
pub use ids::{NodeId, PartitionId, TxnId};
pub use schema::{
    Catalog, ColumnDef, ColumnDefault, DataType, Generator, IndexDef, IndexId, TableDef, TableId,
};
pub use value::{Decimal, Key, Row, Value};
